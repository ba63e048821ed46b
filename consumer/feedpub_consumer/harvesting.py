"""`harvest`: one entry point for every format the harvester reads, told by the state
file, the caller, the URL (an OAI-PMH request has a `verb=` argument), or the first answer
(its Content-Type; an OAI-PMH root element); it imports the format-specific harvesters, and
none of them imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .harvest import Harvester, HarvestFailed, HarvestResult, Meter
from .http import ATOM, LINKED_PAGES, FetchError, HttpClient, Limits, is_multipart
from .linkedharvest import LinkedHarvester, LinkedState
from .oai import OAI_PMH, OaiHarvester, OaiState, is_oai_pmh, is_oai_url
from .state import HarvestState, StateError, open_state, state_format

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any


def harvest(url: str, *, state_path: str | os.PathLike | None = None,
            limits: Limits | None = None, progress: tqdm | None = None,
            client: HttpClient | None = None, warn: Callable[[str], None] | None = None,
            format: str | None = None, snapshot: str | None = None,
            start: str = "auto", metadata_prefix: str | None = None,
            set_spec: str | None = None, fetch_records: bool | None = False) -> HarvestResult:
    """Harvest the feed at `url`, updating the state file if one is given.

    `url` is an Atom subscription document, a linked-pages entry point (see
    consumer/feedpub_consumer/linkedharvest.py, which also explains `snapshot` and `start`) or an
    OAI-PMH base URL (consumer/feedpub_consumer/oai.py: `metadata_prefix`, `set_spec`); for Atom,
    `fetch_records` fetches each changed live record's JSON at its alternate link (for
    the key and metadata an entry does not carry; None: for Atom, yes, as the command
    lines do by default, and no for the formats that carry their records). The format is
    the state file's, else `format`, else OAI-PMH for a URL with a `verb=` argument, else
    told by the first answer: multipart is linked pages, an OAI-PMH root element OAI-PMH,
    anything else Atom.
    `progress`: a tqdm bar the caller shows, brought to the pages fetched as they come.

    Raises HarvestFailed when the feed cannot be read at all, StateError when the state file
    cannot be used; every other problem is a warning in the result. The result's records are
    read from the state (a temporary one without `state_path`) as they are iterated.
    """
    if format not in (None, ATOM, LINKED_PAGES, OAI_PMH):
        raise ValueError(f"unknown format {format!r}")
    db = open_state(state_path)
    try:
        client = client or HttpClient(limits)
        meter, stored, first = Meter.start(client), state_format(db), None
        if stored is not None and format not in (None, stored):
            raise StateError(f"the state file is for a feed in the {stored} format, "
                             f"not {format}")
        kind = stored or format or (OAI_PMH if is_oai_url(url) else None)
        if kind is None:  # one GET tells; the harvester goes on with its answer
            try:
                first = client.fetch(url)
            except FetchError as error:
                raise HarvestFailed(str(error)) from error
            kind = (LINKED_PAGES if is_multipart(first)
                    else OAI_PMH if is_oai_pmh(first) else ATOM)
        if fetch_records is None:  # the command lines' default: whole records
            fetch_records = kind == ATOM
        if kind != ATOM and fetch_records:
            raise HarvestFailed(f"fetching records is for Atom feeds only; {url} is harvested "
                                f"as {kind}, whose records carry their key and metadata")
        if kind != OAI_PMH and (metadata_prefix is not None or set_spec is not None):
            raise HarvestFailed(f"a metadata prefix and a set are for OAI-PMH only; {url} "
                                f"is harvested as {kind}")
        state: OaiState | LinkedState | HarvestState
        if kind == OAI_PMH:
            state = OaiState(db)
            result = OaiHarvester(
                state=state, client=client, progress=progress, warn=warn,
            ).run(url, first=first, meter=meter, metadata_prefix=metadata_prefix,
                  set_spec=set_spec)
        elif kind == LINKED_PAGES:
            state = LinkedState(db)
            result = LinkedHarvester(
                state=state, client=client, progress=progress, warn=warn,
            ).run(url, first=first, meter=meter, snapshot=snapshot, start=start)
        else:
            state = HarvestState(db)
            result = Harvester(state=state, client=client, progress=progress, warn=warn,
                               fetch_records=fetch_records).run(url, first=first, meter=meter)
        state.save()
    except BaseException:
        db.close()
        raise
    return result
