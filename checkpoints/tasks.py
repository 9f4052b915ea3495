"""django-q2 entry points, named by dotted path in the schedules and queued tasks.

Thin: the work is in ``checkpoints.services``.
"""

from __future__ import annotations

from checkpoints.services.pending import checkpoint_flush_after_debounce, checkpoints_flush_due
from checkpoints.services.retention import (
    background_priority,
    prune_scheduled,
    sessions_close_idle,
    task_seconds,
)
from checkpoints.services.throttling import counters_delete_expired


def checkpoint_flush_task(session_id: int) -> bool:
    """Queued by the hook path: write a session's pending checkpoint after its debounce."""
    return checkpoint_flush_after_debounce(session_id=session_id)


def checkpoints_sweep_task() -> int:
    """Every minute: write every pending checkpoint past its debounce (how many), and delete
    the throttle counters of closed windows."""
    counters_delete_expired()
    return checkpoints_flush_due()


def retention_prune_task() -> int:
    """Every ``prune_interval_minutes``: apply the retention policy; checkpoints deleted."""
    return prune_scheduled().checkpoints


def sessions_close_idle_task() -> int:
    """Every few minutes: end the sessions idle for ``idle_session_minutes``; how many."""
    background_priority()
    return sessions_close_idle(max_seconds=task_seconds()).closed
