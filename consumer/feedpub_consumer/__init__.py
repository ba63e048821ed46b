"""The consumer tools: a harvester that rebuilds a feed's live records and a checker that
walks a feed against its specs, for archived Atom, RSS 2.0 and linked-pages feeds on any
server; the harvester also reads OAI-PMH 2.0 repositories. A distribution of their own,
feedpub-consumer (consumer/pyproject.toml): they may use the standard library, lxml, tqdm
(progress bars) and jsonschema-rs (records against their schema), never Django or the server
(`archives`, `feedpub`), which depends on them instead. `http`, `atom` and `state` are the
base; the format modules build on them; `harvesting` and `checking` dispatch to the formats;
`cli` is `feedpub-harvest` and `feedpub-checkfeed` (and the server's `manage.py harvest` and
`checkfeed`); `progress` draws the bars of these and of the server's commands.
"""
