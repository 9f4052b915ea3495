from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class CheckpointsConfig(AppConfig):
    name = "checkpoints"
    verbose_name = "Signet Continuity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.models import User

        from checkpoints.models import ApiToken
        from checkpoints.services.tokens import token_cache_clear

        # A token or its owner changed (revoked, scopes, deactivated): this process forgets
        # the tokens it authenticated; other processes within SIGNET_TOKEN_CACHE_SECONDS.
        for model in (ApiToken, User):
            for signal in (post_save, post_delete):
                signal.connect(token_cache_clear, sender=model, dispatch_uid=f"tokens-{model}")
