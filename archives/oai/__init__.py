"""OAI-PMH 2.0 from the same log: the harvesting protocol metadata aggregators run, at /oai.

`protocol` reads requests (verbs, arguments, dates, resumption tokens) and knows every
protocol error; `repository` reads records, sets, the safe point of the log and the Dublin
Core a feed's record schema maps (x-dc); `metadata` writes a record in each format (oai_dc,
and feedpub's lossless one, whose schema ships here); `verbs` answers each verb; `views` is
the HTTP door. May use models, validation, formats, db (its list reads, record schemas) and
documents (URLs, escaping); nothing imports it but the URLs.
"""
