"""Every document feedpub serves, and the formats they are rendered in.

`base` holds what every document answers with (validators, ETags, Last-Modified, caches);
`feeds`, `records` and `linked` the documents by kind; `atom`, `rss` and `linkedpages` render
bytes. May use models, validation, formats and db; never the write path, storage or views.
"""
