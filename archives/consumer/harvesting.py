"""`harvest`: one entry point for every format the harvester reads, told by the state
file, the caller, or the first answer's Content-Type; it imports the format-specific
harvesters, and none of them imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .harvest import Harvester, HarvestFailed, HarvestResult, Meter
from .http import ATOM, LINKED_PAGES, FetchError, HttpClient, Limits, is_multipart
from .linkedharvest import LinkedHarvester, LinkedState
from .state import HarvestState, StateError, open_state, state_format

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any


def harvest(url: str, *, state_path: str | os.PathLike | None = None,
            limits: Limits | None = None, progress: tqdm | None = None,
            client: HttpClient | None = None, warn: Callable[[str], None] | None = None,
            format: str | None = None, snapshot: str | None = None,
            start: str = "auto") -> HarvestResult:
    """Harvest the feed at `url`, updating the state file if one is given.

    `url` is an Atom subscription document or a linked-pages entry point (see
    archives/consumer/linkedharvest.py, which also explains `snapshot` and `start`). The
    format is the state file's, else `format`, else told by the first answer's Content-Type.
    `progress`: a tqdm bar the caller shows, brought to the pages fetched as they come.

    Raises HarvestFailed when the feed cannot be read at all, StateError when the state file
    cannot be used; every other problem is a warning in the result. The result's records are
    read from the state (a temporary one without `state_path`) as they are iterated.
    """
    if format not in (None, ATOM, LINKED_PAGES):
        raise ValueError(f"unknown format {format!r}")
    db = open_state(state_path)
    try:
        client = client or HttpClient(limits)
        meter, stored, first = Meter.start(client), state_format(db), None
        if stored is not None and format not in (None, stored):
            raise StateError(f"the state file is for a feed in the {stored} format, "
                             f"not {format}")
        kind = stored or format
        if kind is None:  # one GET tells; the harvester goes on with its answer
            try:
                first = client.fetch(url)
            except FetchError as error:
                raise HarvestFailed(str(error)) from error
            kind = LINKED_PAGES if is_multipart(first) else ATOM
        if kind == LINKED_PAGES:
            state = LinkedState(db)
            result = LinkedHarvester(
                state=state, client=client, progress=progress, warn=warn,
            ).run(url, first=first, meter=meter, snapshot=snapshot, start=start)
        else:
            state = HarvestState(db)
            result = Harvester(state=state, client=client, progress=progress,
                               warn=warn).run(url, first=first, meter=meter)
        state.save()
    except BaseException:
        db.close()
        raise
    return result
