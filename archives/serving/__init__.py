"""HTTP for consumers: the views (thin: find a document, answer 304 or its bytes), content
negotiation between feeds and pages for people, long polling (ASGI), and in development a
check that requests come to FEEDPUB_BASE_URL's host (`basecheck`). May use everything
below it (documents, html, storage, push); only urls and feedpub's ASGI app import it.
"""
