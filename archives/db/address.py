"""The base URL a feed's documents are sealed under, recorded in its row (`Feed.base_url`),
so that a process configured with another FEEDPUB_BASE_URL refuses to write or seal instead
of freezing links to the wrong address into pages that never change (docs/operating/moving.md).

The check reads the feed row that every write (its lock) and every seal (its refresh) reads
anyway: it costs no query of its own. A feed recorded under no address yet (never written
nor sealed) takes the process's at its first write or seal, unless another feed is recorded
under another address (one query, once per feed): one service, one address. Only
`rerender_documents` moves a recorded address (archives/log/rerendering.py).
"""

from __future__ import annotations

from django.core.management.base import CommandError

from archives.conf import settings
from archives.models import Feed


class WrongBaseURL(CommandError):
    """This process's FEEDPUB_BASE_URL is not the one the feed is sealed under. (A
    CommandError, so that a command that writes or seals stops with this text, not a
    traceback.)"""

    def __init__(self, feed: Feed, recorded: str, configured: str):
        self.recorded, self.configured = recorded, configured
        whose = f"feed {feed.slug!r} is" if recorded == feed.base_url else "the feeds are"
        super().__init__(
            f"This process has FEEDPUB_BASE_URL={configured}, but {whose} sealed under "
            f"{recorded}: nothing was written or sealed, as sealed pages keep their links "
            f"forever. Run it with FEEDPUB_BASE_URL={recorded} (the checkout's .env sets it "
            f"for every command), or, if the service has moved to {configured}, run "
            f"`manage.py rerender_documents` with FEEDPUB_BASE_URL={configured} first.")


def check(feed: Feed) -> bool:
    """Raise WrongBaseURL unless `feed` (as just read) may be written or sealed under
    FEEDPUB_BASE_URL; True when it has no address yet, and the caller's update of the row
    must record `feed.base_url`, set here to FEEDPUB_BASE_URL."""
    configured = settings.FEEDPUB_BASE_URL
    if feed.base_url == configured:
        return False
    if feed.base_url:
        raise WrongBaseURL(feed, feed.base_url, configured)
    other = (Feed.objects.exclude(base_url="").exclude(base_url=configured)
             .values_list("base_url", flat=True).first())
    if other is not None:
        raise WrongBaseURL(feed, other, configured)
    feed.base_url = configured
    return True


def require(feed: Feed) -> None:
    """`check`, recording the address itself if the feed had none: for the callers that
    store documents of the feed without updating its row (snapshots, the backfills)."""
    if check(feed):
        Feed.objects.filter(pk=feed.pk, base_url="").update(base_url=feed.base_url)
