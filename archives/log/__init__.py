"""The log and the only code that writes it: `publishing` (every create, update and delete,
one transaction under the feed's lock) and `sealing` (freezing full pages, then exporting
them). May use storage, documents and below; never push, serving, api or admin.
"""
