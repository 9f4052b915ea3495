from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "checkpoints"
    verbose_name = "Signet Continuity"
    default_auto_field = "django.db.models.BigAutoField"
