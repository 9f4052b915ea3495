"""The continuity policy (``ContinuityConfig``) as every worker sees it."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction

from checkpoints.models import ContinuityConfig
from checkpoints.services.schedules import schedules_ensure

logger = logging.getLogger(__name__)

CACHE_KEY = "signet:continuity-config:v1"


def config_get() -> ContinuityConfig:
    """Return the one config row, from the shared cache when it is there.

    The first call creates the row from ``SIGNET_CONFIG_DEFAULTS`` (the environment). The
    cache is shared by all workers and evicted by ``config_save``, so an admin's change
    applies to the next request of every worker without a restart.
    """
    cached: ContinuityConfig | None = cache.get(CACHE_KEY)
    if cached is not None:
        return cached
    config = _config_load_or_create()
    cache.set(CACHE_KEY, config, timeout=settings.SIGNET_CONFIG_CACHE_SECONDS)
    return config


def _config_load_or_create() -> ContinuityConfig:
    try:
        return ContinuityConfig.objects.get(pk=ContinuityConfig.SINGLETON_ID)
    except ContinuityConfig.DoesNotExist:
        pass
    defaults: dict[str, Any] = dict(settings.SIGNET_CONFIG_DEFAULTS)
    config = ContinuityConfig(pk=ContinuityConfig.SINGLETON_ID, **defaults)
    # Field rules only: a uniqueness check here would race the other workers creating the
    # row at the same moment (the insert below settles that race).
    config.clean_fields()
    config.clean()
    try:
        # Two workers may both find no row; the loser of the insert reads the winner's row.
        with transaction.atomic():
            config.save(force_insert=True)
    except IntegrityError:
        return ContinuityConfig.objects.get(pk=ContinuityConfig.SINGLETON_ID)
    return config


def config_save(*, config: ContinuityConfig) -> ContinuityConfig:
    """Validate and store the config; once committed, evict the shared cached copy and
    re-register the schedules it drives (the prune's cadence)."""
    config.pk = ContinuityConfig.SINGLETON_ID
    config.full_clean()
    config.save()
    # After the commit: a worker reading in between would cache the old row again.
    transaction.on_commit(lambda: _config_saved(config))
    return config


def _config_saved(config: ContinuityConfig) -> None:
    config_cache_clear()
    try:
        schedules_ensure(config=config)
    except Exception:  # the settings are saved; the next setup_schedules catches up
        logger.exception("could not re-register the schedules after a settings change")


def config_cache_clear() -> None:
    """Forget the cached config (after a save, or in tests)."""
    cache.delete(CACHE_KEY)
