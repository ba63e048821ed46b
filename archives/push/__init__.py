"""WebSub: feedpub is the hub of its own topics. `hub` checks and records subscription
requests; `worker` verifies them and delivers changes. May use documents and below; learns of
writes from the database (NOTIFY and polling), so the write path never imports it.
"""
