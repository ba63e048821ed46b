"""The consumer tools: a harvester that rebuilds a feed's live records and a checker that
walks a feed against its specs, for archived Atom, RSS 2.0 and linked-pages feeds on any
server; the harvester also reads OAI-PMH 2.0 repositories. A library of their own: they may
use the standard library, lxml and (for progress bars) tqdm, never Django or the rest of
archives. `http`, `atom` and `state` are the base; the format modules build on them;
`harvesting` and `checking` dispatch to the formats; `cli` is `feedpub-harvest` and
`feedpub-checkfeed` (and `manage.py harvest` and `checkfeed`).
"""
