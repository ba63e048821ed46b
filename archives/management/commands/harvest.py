"""Harvest an RFC 5005 archived feed, a linked-pages feed or an OAI-PMH repository (any
server) into its live records: `feedpub-harvest` as a management command
(consumer/feedpub_consumer/cli.py)."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand
from feedpub_consumer import cli


class Command(BaseCommand):
    help = cli.HARVEST_HELP

    def add_arguments(self, parser):
        cli.harvest_arguments(parser)

    def handle(self, *args, **options):
        status = cli.run_harvest(options, stdout=self.stdout, stderr=self.stderr)
        if status:
            sys.exit(status)
