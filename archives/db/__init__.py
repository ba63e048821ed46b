"""Below the documents: reading the log fast and knowing each feed's head.

`fastsql` holds the hand-compiled SQL, COPY and LATERAL shortcuts past the ORM (each pinned
by a test to the SQL it sends); `heads` keeps the Feed rows a process serves fresh through
LISTEN/NOTIFY, and `announce` is how the write path tells every process; `cache` counts
requests in the cache every process shares (the database's table or Redis) for the API's
and the hub's throttles, which both import it (neither may import the other); `schemas`
keeps each version of a feed's record schema compiled; `django_internals` and
`psycopg_internals` hold every use of what Django and psycopg do not promise to keep (the
ORM's compiler, a model's private state, ModelBackend's permission cache, the psycopg cursor
beneath Django's), each pinned by a canary test. May use models and validation only, and of
the libraries Django's cache, Redis' errors and DRF's throttle base.
"""
