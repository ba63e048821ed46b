"""Sealed documents kept beside the database: `export` writes frozen pages as files (local or
S3) for nginx to serve; `snapshots` takes the linked-pages format's snapshots of live records.
May use documents and below; the write path calls in, never the other way.
"""
