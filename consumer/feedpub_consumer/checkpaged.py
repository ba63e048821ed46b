"""Conformance checks for RFC 5005's complete feeds (section 2) and paged feeds (section 3),
usable against any server. feedpub_consumer/check.py hands a document over here when it is one
(`checker_for`): it carries fh:complete, or paged links (first, last, next, previous) and no
archive links. Each document gets the archived-feed checker's own checks (RELAX NG and
Schematron, Atom-PMH entries, HTTP), and:

- `complete.duplicate`: an atom:id twice in a complete feed (one entry per record).
- `complete.deletion`: a deletion entry in a complete feed (Atom-PMH: deleted records are
  simply absent from it).
- `paged.links`: a paged document without any of first, last, next, previous.
- `paged.loop`: following `next` comes back to a document.
- `paged.previous`: B reached by `next` from A whose `previous` is not A (or A has
  `previous` B and B's `next` is not A: the two are each other's inverse).
- `paged.first` / `paged.last`: documents that disagree on `first` or `last`, a first page
  (no `previous`) that is not `first`, a last page (no `next`) that is not `last`.
- `paged.duplicate`: an entry (atom:id and updated) on two documents, or twice on one.
- `http.link-header`: the Link header and the document name different paged links.
"""

from __future__ import annotations

from io import BytesIO

from lxml import etree

from .atom import FH, A, AtomDocument
from .check import Checker, CheckResult, Page, fetch_start
from .http import Response, RunLimitReached, parse_link_header

PAGED_RELS = ("first", "last", "next", "previous")
ARCHIVE_RELS = ("prev-archive", "next-archive")
COMPLETE, PAGED = "complete", "paged"


def style_of(response: Response) -> str | None:
    """COMPLETE or PAGED when the document's head says it is one, else None. Reads the
    head only (up to the first entry): a complete feed may be large."""
    complete, rels = False, set()
    try:
        for _, element in etree.iterparse(BytesIO(response.body), events=("start",),
                                          resolve_entities=False, no_network=True):
            if element.tag == f"{A}entry":
                break
            if element.tag == f"{FH}complete":
                complete = True
            elif element.tag == f"{A}link":
                rels.add(element.get("rel", "alternate"))
    except etree.XMLSyntaxError:
        return None  # the archived-feed checker says what is wrong with it
    if complete:
        return COMPLETE
    if rels & set(PAGED_RELS) and not rels & set(ARCHIVE_RELS):
        return PAGED
    return None


def checker_for(first: Response, **options) -> Checker | None:
    """The checker for a complete or paged feed whose first document is `first`, else None."""
    style = style_of(first)
    if style == COMPLETE:
        return CompleteChecker(**options)
    if style == PAGED:
        return PagedChecker(**options)
    return None


class CompleteChecker(Checker):
    """A complete feed: one document, one active entry per record."""

    def _check_document(self, page: Page, document: AtomDocument) -> None:
        super()._check_document(page, document)
        url = page.url
        if not document.is_complete:
            return
        seen: set[str] = set()
        for entry in document.entries:
            if entry.id in seen:
                self._problem(url, "complete.duplicate",
                              f"entry {entry.id} appears more than once in a complete feed")
            seen.add(entry.id)
            if entry.is_deletion:
                self._problem(url, "complete.deletion",
                              f"deletion entry {entry.id} in a complete feed: a deleted record "
                              "is simply absent from it")


class PagedChecker(Checker):
    """A paged feed, walked along `next` from the given document to its end."""

    def run(self, url: str, first: Response | None = None) -> CheckResult:
        if self.state_path is not None:
            self.notes.append("the state file is not used on a paged feed: RFC 5005 promises "
                              "nothing about the stability of its documents")
        self.entries: dict[tuple[str, str], str] = {}
        try:
            # its describedby schema is fetched too
            start = self._accept(url, first or fetch_start(self.client, url))
            self._walk_next(start)
            self._check_first_and_last()
            newest = self.pages[url].document
            if newest is not None and not newest.link("previous"):
                # Walked from the newest entries: which records are live is known.
                self._check_alternates()
        except RunLimitReached as error:
            self._stopped(error)
        return self._result(len(self.pages))

    def _walk_next(self, current: Page) -> None:
        self.chain = [current.url]  # newest first, as _check_alternates expects
        self._check_entries(current)
        while current.document is not None and (target := current.document.link("next")):
            if target in self.pages:
                self._problem(current.url, "paged.loop",
                              f"next leads back to {target}, already reached on this walk")
                return
            page = self._get(target, referrer=current.url, rel="next")
            if page is None:
                return
            self._check_inverse(current, page)
            self.chain.append(target)
            self._check_entries(page)
            current = page

    def _check_inverse(self, newer: Page, older: Page) -> None:
        """`newer` links `next` to `older`."""
        if older.document is not None and older.document.link("previous") != newer.url:
            self._problem(older.url, "paged.previous",
                          f"{newer.url} links next here, but this document's previous is "
                          f"{older.document.link('previous') or 'missing'}")

    def _check_entries(self, page: Page) -> None:
        if page.document is None:
            return
        here: set[tuple[str, str]] = set()
        for entry in page.document.entries:
            key = (entry.id, str(entry.updated))
            if key in here or key in self.entries:
                self._problem(page.url, "paged.duplicate",
                              f"entry {entry.id} ({entry.updated}) is also on "
                              f"{self.entries.get(key, page.url)}")
            here.add(key)
            self.entries.setdefault(key, page.url)

    def _check_first_and_last(self) -> None:
        documents = [document for url in self.chain
                     if (document := self.pages[url].document) is not None]
        for rel, end in (("first", self.chain[0]), ("last", self.chain[-1])):
            named = {link for document in documents if (link := document.link(rel)) is not None}
            if len(named) > 1:
                names = ", ".join(sorted(named))
                self._problem(self.chain[0], f"paged.{rel}",
                              f"the documents name different {rel} links: {names}")
                continue
            # The walk began at a document without `previous` and ended at one without `next`.
            at_end = self.pages[end].document
            open_end = at_end is not None and not at_end.link(
                "previous" if rel == "first" else "next")
            if named and open_end and end not in named:
                self._problem(end, f"paged.{rel}",
                              f"this document has no {'previous' if rel == 'first' else 'next'} "
                              f"link, but the feed's {rel} is {named.pop()}")

    # Per document -------------------------------------------------------------------

    def _check_document(self, page: Page, document: AtomDocument) -> None:
        super()._check_document(page, document)
        if not any(document.link(rel) for rel in PAGED_RELS):
            self._problem(page.url, "paged.links",
                          "a paged feed document without first, last, next or previous links")

    def _check_http(self, page: Page) -> None:
        super()._check_http(page)
        document, response = page.document, page.response
        if document is not None and response.header("Link"):
            in_header = {pair for pair in parse_link_header(response.header("Link"),
                                                            response.url)
                         if pair[0] in PAGED_RELS}
            in_document = {(rel, href) for rel in PAGED_RELS
                           for href in document.links.get(rel, [])}
            for rel, href in sorted(in_header ^ in_document) if in_header else ():
                where = "the Link header" if (rel, href) in in_header else "the document"
                self._problem(page.url, "http.link-header",
                              f"{rel} {href} is only in {where}; the Link header and the "
                              "document must name the same links")

    def _may_be_immutable(self, document: AtomDocument | None) -> bool:
        """Only a document that is not the first page: the first receives new entries."""
        return document is not None and document.link("previous") is not None
