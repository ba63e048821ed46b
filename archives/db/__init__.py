"""Below the documents: reading the log fast and knowing each feed's head.

`fastsql` holds the hand-compiled SQL, COPY and LATERAL shortcuts past the ORM (each pinned
by a test to the SQL it sends); `heads` keeps the Feed rows a process serves fresh through
LISTEN/NOTIFY, and `announce` is how the write path tells every process. May use models only.
"""
