"""Check that an archived feed (any server) obeys RFC 5005, Atom-PMH, RFC 4287 and HTTP (or,
in RSS 2.0, RFC 5005 Appendix B), or that a linked-pages feed obeys its rules and HTTP:
`feedpub-checkfeed` as a management command (consumer/feedpub_consumer/cli.py)."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand
from feedpub_consumer import cli


class Command(BaseCommand):
    help = cli.CHECKFEED_HELP

    def add_arguments(self, parser):
        cli.checkfeed_arguments(parser)

    def handle(self, *args, **options):
        status = cli.run_checkfeed(options, stdout=self.stdout, stderr=self.stderr)
        if status:
            sys.exit(status)
