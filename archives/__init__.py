"""feedpub's Django app: archived Atom feeds of metadata records.

Packages by concern, lowest layer first; a module imports only from its own layer or lower:

- validation, formats (this folder): the record rules, ids and dates; above them jsoninput
  (JSON read strictly, to the record rules' depth) and models, the tables
- db: hand-compiled SQL and each process's heads of feeds (LISTEN/NOTIFY)
- documents: every document the log is served as (Atom, RSS, linked pages) and its validators
- html: the pages for people; storage: sealed pages as files, snapshots
- log: the single write path and sealing
- push: WebSub (the hub and its worker)
- serving: views, negotiation, long polling; oai: OAI-PMH 2.0 from the same log
- api, admin, management, urls: the doors producers and operators use
- consumer: the harvester and checker; imports nothing of Django or of the rest of this app

import-linter's contracts in pyproject.toml hold the code to these rules (`lint-imports`;
tests/test_layers.py runs it).
"""
