from django.apps import AppConfig
from django.db.backends.signals import connection_created


class ArchivesConfig(AppConfig):
    name = "archives"
    verbose_name = "Archived feeds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from archives.conf import settings
        from archives.db.search import register_sqlite_functions

        # A setting missing or unusable stops the process as it starts, naming the setting.
        settings.check()

        # Record search's folding functions, which PostgreSQL has from migration 0017.
        connection_created.connect(register_sqlite_functions,
                                   dispatch_uid="feedpub_search_functions")

    def subscription_formats(self) -> list[tuple[str, str]]:
        """The WebSub topics' formats, from the registry of document kinds, handed down to
        the models (archives.models.subscription_formats), which sit below it."""
        from archives.documents import kinds

        return kinds.subscription_formats()
