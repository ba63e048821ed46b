"""The log and the only code that writes it: `publishing` (every create, update and delete,
one transaction under the feed's lock), `sealing` (freezing full pages, then exporting
them) and `rerendering` (frozen documents rendered again after a move to another base
URL, their entries unchanged). May use storage, documents and below; never push, serving,
api or admin.
"""
