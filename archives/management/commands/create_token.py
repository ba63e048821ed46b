"""Make an API token: `python manage.py create_token USER --name NAME`. Its secret is printed
once, alone on the last line: `TOKEN=$(manage.py create_token ... | tail -n1)`."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from archives.log.tokens import issue_token


class Command(BaseCommand):
    help = ("Make a named API token for a user, optionally scoped to some feeds, read-only or "
            "expiring, and print its secret (once: only its digest is stored) on the last "
            "line.")

    def add_arguments(self, parser):
        parser.add_argument("user", metavar="USER", help="the username of its user")
        parser.add_argument("--name", required=True,
                            help="what it is for, unique among the user's tokens")
        parser.add_argument("--feeds", default="", metavar="SLUG,SLUG",
                            help="the only feeds it may write (default: every feed its user "
                                 "may write)")
        parser.add_argument("--read-only", action="store_true", help="it may only read")
        parser.add_argument("--expires", metavar="ISO-8601",
                            help="when it stops working, e.g. 2027-06-30 or "
                                 "2027-06-30T18:00:00Z (default: never)")

    def handle(self, *args, user, name, feeds, read_only, expires, **options):
        owner = get_user_model()._default_manager.filter(
            **{get_user_model().USERNAME_FIELD: user}).first()
        if owner is None:
            raise CommandError(f"No user {user!r}: make it first (manage.py createsuperuser, "
                               "or the admin).")
        slugs = [slug.strip() for slug in feeds.split(",") if slug.strip()]
        try:
            token, secret = issue_token(user=owner, name=name, feeds=slugs,
                                        read_only=read_only, expires=_instant(expires))
        except ValidationError as error:
            raise CommandError(" ".join(f"--{field.replace('_', '-')}: {message}"
                                        for field, messages in error.message_dict.items()
                                        for message in messages)) from None
        scope = ", ".join(slugs) or "every feed its user may write"
        self.stdout.write(
            f"Token '{token.name}' of {user} ({scope}; {'read-only' if read_only else 'writes'}"
            f"; {'expires ' + token.expires.isoformat() if token.expires else 'never expires'})"
            ". Its secret, shown this once:")
        self.stdout.write(secret)


def _instant(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--expires: {text!r} is no ISO 8601 date or time (e.g. "
                           "2027-06-30 or 2027-06-30T18:00:00Z).") from None
    # A time without an offset is the server's TIME_ZONE's, as the admin reads one.
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment
