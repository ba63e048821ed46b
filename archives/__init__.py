"""feedpub's Django app: archived Atom feeds of metadata records.

Packages by concern, lowest layer first; a module imports only from its own layer or lower:

- conf (this folder): the app's FEEDPUB_* settings and their defaults, which any module reads
- validation, formats, parameters (this folder): the record rules, ids and dates, request
  parameters (each given once); above them jsoninput (JSON read strictly, to the record
  rules' depth) and models, the tables
- db: hand-compiled SQL and each process's heads of feeds (LISTEN/NOTIFY)
- documents: every document the log is served as (Atom, RSS, linked pages) and its validators
- html: the pages for people; storage: sealed pages as files, snapshots
- log: the single write path and sealing
- push: WebSub (the hub and its worker)
- serving: views, negotiation, long polling; oai: OAI-PMH 2.0 from the same log
- api, admin, management, urls: the doors producers and operators use

The harvester and checker are not here: they are the feedpub-consumer distribution
(consumer/feedpub_consumer/), which imports nothing of Django or of this app; the
management commands wrap them and draw their progress bars with its `progress`.

import-linter's contracts in pyproject.toml hold the code to these rules (`lint-imports`;
tests/test_layers.py runs it).
"""
