"""django-q2 entry points. Thin: the work is in ``checkpoints.services``."""

from __future__ import annotations

import logging
import time

from django.utils import timezone

from checkpoints.models import Session
from checkpoints.services.config import config_get
from checkpoints.services.engine import (
    checkpoint_flush,
    checkpoints_flush_due,
    hook_deliveries_prune,
)

logger = logging.getLogger(__name__)

# A worker waits out at most this much of a debounce; the sweep covers anything longer.
MAX_DEBOUNCE_WAIT_SECONDS = 10.0


def enqueue_checkpoint_flush(session_id: int) -> None:
    """Queue the write of a session's pending checkpoint, off the request.

    Failing to queue (broker down) loses nothing: the mark stays in the database and the
    next event of the session or the sweep writes it.
    """
    from django_q.tasks import async_task

    try:
        async_task(
            "checkpoints.tasks.checkpoint_flush_task", session_id, task_name="checkpoint-flush"
        )
    except Exception:
        logger.exception("could not queue the checkpoint flush of session %s", session_id)


def checkpoint_flush_task(session_id: int) -> bool:
    """Wait out the debounce of the session's pending checkpoint, then write it."""
    pending = (
        Session.objects.filter(pk=session_id)
        .values_list("checkpoint_pending_since", flat=True)
        .first()
    )
    if pending is None:
        return False
    remaining = config_get().debounce_seconds - (timezone.now() - pending).total_seconds()
    if remaining > 0:
        time.sleep(min(remaining, MAX_DEBOUNCE_WAIT_SECONDS))
    return checkpoint_flush(session_id=session_id)


def checkpoints_sweep_task() -> int:
    """Scheduled every minute: write every pending checkpoint past its debounce, and
    forget idempotency keys older than the retention period."""
    written = checkpoints_flush_due()
    hook_deliveries_prune(keep_days=config_get().retention_days)
    return written
