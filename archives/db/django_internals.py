"""Every place feedpub reaches past Django's public API, and nowhere else: the ORM's SQL
compiler, a model instance's private state, the permission cache ModelBackend keeps on a
user, and the flags that say a kept connection had errors. Each is here for a measured
cost or a failure it prevents (the docstrings say which), and each is pinned by a canary in
tests/test_library_internals.py that fails naming Django's version if Django changes what
it relies on. (`Model._meta`'s get_field, db_table and pk are Django's documented Options
API, used where they are needed.)
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


def compile_select(queryset: models.QuerySet, db: BaseDatabaseWrapper) -> tuple[
        str, list[str], Callable[[list[tuple]], tuple]]:
    """A queryset's SELECT compiled once for the connection `db`, to be executed again
    and again with other parameters: (its SQL, the attnames of its columns in order, and
    a function from fetched rows to the first row's values as the ORM converts them).

    Compiling the poll's one query each time cost more than the indexed lookup itself
    (~0.25 ms of ~0.5 ms: archives/db/fastsql.py's feed_by_slug). The compiler also
    supplies the backend's converters (SQLite stores UUIDs and datetimes as text).
    """
    compiler = queryset.query.get_compiler(connection=db)
    sql, _ = compiler.as_sql()
    columns = [column for column, _, _ in compiler.select]
    converters = compiler.get_converters(columns)

    def first_row(rows: list[tuple]) -> tuple:
        return next(iter(compiler.apply_converters(rows, converters))) if converters \
            else rows[0]

    # A model's column by its attname; an annotation by its alias.
    return sql, [alias or column.target.attname for column, _, alias in compiler.select], \
        first_row


def mark_saved(instances: Iterable[models.Model], *, using: str = "default") -> None:
    """Mark instances inserted by other means than save() or bulk_create (COPY, one
    INSERT of several rows: archives/log/publishing.py) as saved in `using`, as
    bulk_create leaves its instances: a later save() then updates them instead of
    inserting them again, and related lookups go to that database."""
    for instance in instances:
        instance._state.adding, instance._state.db = False, using


def take_state(instance: models.Model, saved: models.Model) -> None:
    """Make `instance` the same as `saved`, another instance of the same row: its fields
    and its saved state. For the admin, which keeps using the instance it handed to
    save_model after the save went through archives/log/publishing.py instead."""
    instance.__dict__.update(saved.__dict__)


# What ModelBackend (django.contrib.auth.backends) keeps on a user: the set of "app.codename"
# names get_all_permissions() returns, read once a request.
PERMISSION_CACHE = "_perm_cache"


def cache_permissions(user: Any, permissions: Sequence[str] | set[str]) -> None:
    """Give `user` the permissions ModelBackend would read for it (its own and its groups'),
    so that its has_perm() reads no more: archives/api/authentication.py reads them in one
    query instead of ModelBackend's two, two of a single PUT's dozen round trips."""
    setattr(user, PERMISSION_CACHE, set(permissions))


def connection_lost(db: BaseDatabaseWrapper, *, check: bool) -> bool:
    """Whether Django's kept connection `db` is open and no longer works: it had errors
    (the flag Django's own close_if_unusable_or_obsolete reads) and, asked with a round trip
    (is_usable), fails; with `check`, asked also when it had none but shows a sign of loss
    (_may_be_lost). For feedpub/reconnect.py, which closes lost connections instead of
    answering 500."""
    if db.connection is None:
        return False
    return (db.errors_occurred or (check and _may_be_lost(db))) and not db.is_usable()


def _may_be_lost(db: BaseDatabaseWrapper) -> bool:
    """On PostgreSQL, whether the idle connection's socket has anything to read: between
    two queries a live server sends nothing (this connection LISTENs to nothing), while one
    that ends it (a restart, pg_terminate_backend, a failover that closes it) leaves its
    FATAL message or the end of the stream there. A poll of the socket costs ~1 us against
    ~220 us for is_usable's round trip, which every write request paid. Elsewhere (SQLite,
    in-process), always: asking costs nothing there."""
    if db.vendor != "postgresql":
        return True
    try:
        poller = select.poll()  # (not select(): a worker's descriptors may pass 1024)
        poller.register(db.connection.fileno(), select.POLLIN)
    except (OSError, ValueError):  # its socket is closed already
        return True
    return bool(poller.poll(0))  # readable, hung up or in error
