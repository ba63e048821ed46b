"""The WebSub hub's subscriptions and the background processes' heartbeats."""

from __future__ import annotations

from django.apps import apps
from django.db import models
from django.utils import timezone


def subscription_formats() -> list[tuple[str, str]]:
    """`Subscription.format`'s choices: the formats of the kinds of document that are WebSub
    topics (archives/documents/kinds.py). That registry sits above the models, so the app's
    config hands it down; read when needed, so a new topic needs no migration."""
    config = apps.get_app_config("archives")
    # (Typed as any AppConfig; this app's is archives.apps.ArchivesConfig.)
    return config.subscription_formats()  # type: ignore[attr-defined]


class Subscription(models.Model):
    """A WebSub subscription (archives/push/): a callback told of every change of one
    topic, a feed's document in one format, until its lease expires.

    A row is made by a subscription request and becomes active once the callback has
    confirmed the intent (`expires_at` set). A request awaiting verification (`intent`) is
    kept beside the active state, so a failed renewal leaves the subscription as it was.
    Delivery state: the feed's version (`Version`: its subscription_modified, last_seq and
    sealed_pages, which only grow) and ETag of the content last delivered, the failures
    since, and when the next attempt is due; `claimed_until` keeps two workers from
    delivering to the same callback in one round."""

    class Mode(models.TextChoices):
        SUBSCRIBE = "subscribe"
        UNSUBSCRIBE = "unsubscribe"

    # Null once the feed is deleted: the subscriber is then told its topic is gone.
    feed = models.ForeignKey("archives.Feed", on_delete=models.SET_NULL, null=True,
                             related_name="subscriptions", db_index=False)
    # The topic's kind, by its format (archives/documents/kinds.py: Kind.topic).
    format = models.CharField(max_length=40, choices=subscription_formats)
    # The topic's own URL (a linked page named as the topic stands for the entry point) and,
    # when active, the URL the subscriber named (hub.topic), which deliveries name back.
    topic = models.URLField(max_length=500)
    named_topic = models.URLField(max_length=500, blank=True)
    callback = models.URLField(max_length=2000)
    created = models.DateTimeField(auto_now_add=True)
    # The active subscription: verified until `expires_at` (None: not verified yet).
    secret = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # The request awaiting verification ("" when none).
    intent = models.CharField(max_length=11, choices=Mode.choices, blank=True)
    intent_topic = models.URLField(max_length=500, blank=True)
    intent_secret = models.CharField(max_length=200, blank=True)
    intent_lease_seconds = models.PositiveIntegerField(null=True, blank=True)
    # When the request was made: a verification's outcome is applied only if no newer
    # request replaced the one it verified.
    intent_at = models.DateTimeField(null=True, blank=True)
    # Delivery: the feed version and ETag last delivered (or skipped: unchanged bytes), the
    # failures since, when to try again. A worker sends only content of a later version
    # than the one delivered, so no older document ever follows a newer one.
    delivered_modified = models.DateTimeField(null=True, blank=True)
    delivered_seq = models.BigIntegerField(default=0)
    delivered_sealed = models.PositiveIntegerField(default=0)
    delivered_etag = models.CharField(max_length=80, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=300, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    # Whether the callback may be at a private address: the hub's setting at the subscriber's
    # latest request, which the worker keeps to (archives/push/hub.py), whatever its own.
    allow_private_callback = models.BooleanField(default=False)

    class Meta:
        ordering = ["topic", "callback"]
        constraints = [
            # One subscription per (topic, callback), as WebSub keys them: a new request
            # renews or replaces it.
            models.UniqueConstraint(fields=["topic", "callback"],
                                    name="subscription_unique_topic_callback"),
        ]
        indexes = [
            # Serves a delivery round: WHERE feed_id = ? AND format = ? AND expires_at > ?
            models.Index(fields=["feed", "format", "expires_at"],
                         name="subscription_topic"),
            # Serves the verifier: WHERE intent <> '' (empty when nothing waits)
            models.Index(fields=["id"], condition=~models.Q(intent=""),
                         name="subscription_intent"),
        ]

    def __str__(self) -> str:
        return f"{self.callback} <- {self.topic}"

    @property
    def is_active(self) -> bool:
        return self.expires_at is not None and self.expires_at > timezone.now()


class Heartbeat(models.Model):
    """When a background process (`name`; "sealer": `seal_archives --watch`) last completed a
    pass, for /metrics (feedpub/metrics.py): those processes run apart from the web's."""

    name = models.CharField(max_length=40, unique=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def beat(cls, name: str) -> None:
        """Record that `name` completed a pass now (one statement when the row exists)."""
        now = timezone.now()
        if not cls.objects.filter(name=name).update(at=now):
            cls.objects.get_or_create(name=name, defaults={"at": now})
