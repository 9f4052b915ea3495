"""The continuity policy (``ContinuityConfig``) as every worker sees it."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction

from checkpoints.models import ContinuityConfig
from checkpoints.services.schedules import schedules_ensure

logger = logging.getLogger(__name__)

CACHE_KEY = "signet:continuity-config:v1"


# This process's copy and until when (monotonic) it may be used without asking the shared
# cache: every hook reads the config, and with the database cache that read is a query.
_local: tuple[float, ContinuityConfig] | None = None


def config_get() -> ContinuityConfig:
    """Return the one config row: this process's copy while it is fresh, else the shared
    cache's, else the database's.

    The first call creates the row from ``SIGNET_CONFIG_DEFAULTS`` (the environment). The
    shared cache is evicted by ``config_save``, and so is the saving process's own copy: an
    admin's change applies at once in that process, and in every other worker within
    ``SIGNET_CONFIG_LOCAL_SECONDS``, without a restart. The object is shared by the
    process's threads: read it, never change it (an edit goes through ``config_save`` on a
    row of its own, as the admin does).
    """
    global _local
    local = _local
    if local is not None and local[0] > time.monotonic():
        return local[1]
    config: ContinuityConfig | None = cache.get(CACHE_KEY)
    if config is None:
        config = _config_load_or_create()
        cache.set(CACHE_KEY, config, timeout=settings.SIGNET_CONFIG_CACHE_SECONDS)
    ttl = settings.SIGNET_CONFIG_LOCAL_SECONDS
    _local = (time.monotonic() + ttl, config) if ttl > 0 else None
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
    """Forget the cached config, shared and this process's (after a save, or in tests)."""
    global _local
    _local = None
    cache.delete(CACHE_KEY)
