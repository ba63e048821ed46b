"""A consumer in miniature, for tests: walk the served documents and rebuild the records.

It reads only what a consumer over HTTP sees (through Django's test client), applies
RFC 5005 section 4.2 (newest atom:updated wins; a tie goes to the newer document) and
Atom-PMH (a deletion entry has no alternate link and an empty content element).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lxml import etree

NS = {"a": "http://www.w3.org/2005/Atom", "fh": "http://purl.org/syndication/history/1.0"}


@dataclass
class Document:
    url: str
    body: bytes
    root: etree._Element

    def link(self, rel: str) -> str | None:
        hrefs = self.root.xpath(f"a:link[@rel='{rel}']/@href", namespaces=NS)
        assert len(hrefs) <= 1, f"{self.url} has {len(hrefs)} {rel} links"
        return hrefs[0] if hrefs else None

    @property
    def updated(self) -> str:
        return self.root.findtext("a:updated", namespaces=NS)

    def entries(self) -> list[dict]:
        return [parse_entry(entry) for entry in self.root.findall("a:entry", NS)]


def parse_entry(entry: etree._Element) -> dict:
    alternates = entry.xpath("a:link[not(@rel) or @rel='alternate']/@href", namespaces=NS)
    content = entry.find("a:content", NS)
    deletion = not alternates and content is not None and not len(content) \
        and not (content.text or "") and content.get("src") is None
    return {
        "id": entry.findtext("a:id", namespaces=NS),
        "updated": entry.findtext("a:updated", namespaces=NS),
        "title": entry.findtext("a:title", namespaces=NS),
        "summary": entry.findtext("a:summary", namespaces=NS),
        "alternates": alternates,
        "deletion": deletion,
    }


def fetch(client, url: str) -> Document:
    response = client.get(urlsplit(url).path)
    assert response.status_code == 200, f"{url}: {response.status_code}"
    return Document(url, response.content, etree.fromstring(response.content))


@dataclass
class Walk:
    documents: list[Document] = field(default_factory=list)  # subscription first

    @property
    def live(self) -> dict[str, dict]:
        """atom:id -> the winning entry, for records whose winner is not a deletion."""
        winners: dict[str, tuple[tuple[str, str], dict]] = {}
        for document in self.documents:
            for entry in document.entries():
                rank = (entry["updated"], document.updated)
                if entry["id"] not in winners or rank > winners[entry["id"]][0]:
                    winners[entry["id"]] = (rank, entry)
        return {key: entry for key, (_, entry) in winners.items() if not entry["deletion"]}


def walk(client, subscription_url: str, *, max_documents: int = 10_000) -> Walk:
    """Fetch the subscription document and every archive back through prev-archive."""
    result = Walk()
    seen = set()
    url = subscription_url
    while url:
        assert url not in seen, f"loop at {url}"
        assert len(seen) < max_documents
        seen.add(url)
        document = fetch(client, url)
        result.documents.append(document)
        url = document.link("prev-archive")
    return result
