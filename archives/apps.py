from django.apps import AppConfig


class ArchivesConfig(AppConfig):
    name = "archives"
    verbose_name = "Archived feeds"
    default_auto_field = "django.db.models.BigAutoField"
