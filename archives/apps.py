from django.apps import AppConfig
from django.db.backends.signals import connection_created


class ArchivesConfig(AppConfig):
    name = "archives"
    verbose_name = "Archived feeds"
    default_auto_field = "django.db.models.BigAutoField"

    # The WebSub topics' formats, handed down to the models (archives.models.subscription_formats)
    # from the registry of document kinds, which sits above them.
    subscription_formats: list[tuple[str, str]] = []

    def ready(self):
        from archives.db.search import register_sqlite_functions
        from archives.documents import kinds

        self.subscription_formats = kinds.subscription_formats()

        # Record search's folding functions, which PostgreSQL has from migration 0017.
        connection_created.connect(register_sqlite_functions,
                                   dispatch_uid="feedpub_search_functions")
