"""Sealed pages exported to an S3-compatible bucket (archives/storage/export.py PagesS3Storage),
against a real S3 API: moto's server on 127.0.0.1, driven with boto3 as a user would."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import uuid
from io import StringIO

import boto3
import pytest
from botocore.exceptions import ClientError
from django.core.management import call_command
from moto.server import ThreadedMotoServer

from archives.documents import base
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Feed
from archives.storage import export

from .factories import record_data
from .nginx_server import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CREDENTIALS = {"aws_access_key_id": "feedpub-test", "aws_secret_access_key": "feedpub-test",
               "region_name": "us-east-1"}
IMMUTABLE = "public, max-age=31536000, immutable"
ATOM, RSS = "application/atom+xml; charset=utf-8", "application/rss+xml; charset=utf-8"


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint, settings):
    """A new bucket, and the feedpub_pages storage pointed at it; a boto3 client."""
    name = f"pages-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_endpoint, **CREDENTIALS)
    client.create_bucket(Bucket=name)
    settings.STORAGES = {**settings.STORAGES, "feedpub_pages": {
        "BACKEND": "archives.storage.export.PagesS3Storage",
        "OPTIONS": {"bucket_name": name, "endpoint_url": s3_endpoint,
                    "region_name": CREDENTIALS["region_name"],
                    "access_key": CREDENTIALS["aws_access_key_id"],
                    "secret_key": CREDENTIALS["aws_secret_access_key"]}}}
    client.bucket = name
    return client


def keys(client) -> set[str]:
    listed = client.list_objects_v2(Bucket=client.bucket)
    return {item["Key"] for item in listed.get("Contents", [])}


def get(client, key: str) -> dict:
    return client.get_object(Bucket=client.bucket, Key=key)


def test_sealed_pages_are_put_with_the_headers_they_are_served_with(bucket, sealed_feed,
                                                                     settled):
    assert export.export_pending() == 2
    assert keys(bucket) == {
        "feeds/books/archives/1/index.xml", "feeds/books/archives/1/index.xml.gz",
        "feeds/books/archives/1/rss/index.xml", "feeds/books/archives/1/rss/index.xml.gz",
        "feeds/books/pages/1",
        "feeds/books/archives/2/open.xml", "feeds/books/archives/2/open.xml.gz",
        "feeds/books/archives/2/rss/open.xml", "feeds/books/archives/2/rss/open.xml.gz",
    }
    page_1, page_2 = ArchivePage.objects.filter(feed=sealed_feed).order_by("number")
    final = get(bucket, "feeds/books/archives/1/index.xml")
    assert final["Body"].read() == bytes(page_1.body)
    assert (final["ContentType"], final["CacheControl"]) == (ATOM, IMMUTABLE)
    assert "ContentEncoding" not in final
    zipped = get(bucket, "feeds/books/archives/1/index.xml.gz")
    assert gzip.decompress(zipped["Body"].read()) == bytes(page_1.body)
    assert (zipped["ContentType"], zipped["ContentEncoding"]) == (ATOM, "gzip")
    twin = get(bucket, "feeds/books/archives/2/rss/open.xml")
    assert twin["Body"].read() == bytes(page_2.rss)
    assert (twin["ContentType"], twin["CacheControl"]) == (RSS, "public, max-age=60")
    linked = get(bucket, "feeds/books/pages/1")
    body = linked["Body"].read()
    assert body == bytes(page_1.multipart)
    assert linked["ContentType"].startswith("multipart/mixed; boundary=")
    assert linked["ContentType"].split("boundary=")[1].strip('"').encode() in body


def test_the_final_version_replaces_the_open_object(bucket, sealed_feed, settled):
    export.export_pending()
    feed = Feed.objects.get(pk=sealed_feed.pk)
    for n in range(2):
        publishing.put_record(feed=feed, key=f"more{n}", data=record_data(n))
    seal_feed(feed)  # page 3: page 2 gains next-archive, its open objects go
    assert not {key for key in keys(bucket) if key.startswith("feeds/books/archives/2/")}
    assert export.export_pending() == 2
    page_2 = ArchivePage.objects.get(feed=sealed_feed, number=2)
    final = get(bucket, "feeds/books/archives/2/index.xml")
    assert final["Body"].read() == bytes(page_2.body)
    assert final["CacheControl"] == IMMUTABLE
    with pytest.raises(ClientError, match="NoSuchKey"):
        get(bucket, "feeds/books/archives/2/open.xml")


def test_verify_puts_back_missing_and_stale_objects(bucket, sealed_feed, settled):
    export.export_pending()
    bucket.delete_object(Bucket=bucket.bucket, Key="feeds/books/archives/1/index.xml")
    bucket.put_object(Bucket=bucket.bucket, Key="feeds/books/archives/2/open.xml.gz",
                      Body=b"stale")
    out = StringIO()
    call_command("export_pages", "--verify", stdout=out)
    assert "2 pages verified: 2 files written, 0 superseded" in out.getvalue()
    page_1, page_2 = ArchivePage.objects.filter(feed=sealed_feed).order_by("number")
    assert get(bucket, "feeds/books/archives/1/index.xml")["Body"].read() == bytes(page_1.body)
    repaired = get(bucket, "feeds/books/archives/2/open.xml.gz")
    assert gzip.decompress(repaired["Body"].read()) == bytes(page_2.body)
    assert repaired["ContentEncoding"] == "gzip"


def test_settings_choose_the_bucket_from_the_environment(s3_endpoint):
    """FEEDPUB_PAGES_BUCKET and friends, as a deployment sets them (a fresh process: the
    settings module reads the environment once)."""
    code = ("import django; django.setup(); "
            "from django.core.files.storage import storages; s = storages['feedpub_pages']; "
            "print(type(s).__name__, s.bucket_name, s.endpoint_url, s.location)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "feedpub.settings",
           "FEEDPUB_PAGES_BUCKET": "feeds", "FEEDPUB_PAGES_ENDPOINT_URL": s3_endpoint,
           "FEEDPUB_PAGES_PREFIX": "pub"}
    shown = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,  # noqa: S603
                           capture_output=True, text=True).stdout.split()
    assert shown == ["PagesS3Storage", "feeds", s3_endpoint, "pub"]
    assert base.IMMUTABLE == IMMUTABLE
