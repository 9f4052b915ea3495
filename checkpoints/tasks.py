"""django-q2 entry points, named by dotted path in the schedules and queued tasks.

Thin: the work is in ``checkpoints.services``.
"""

from __future__ import annotations

from checkpoints.services.pending import checkpoints_flush_due, checkpoints_flush_marked
from checkpoints.services.retention import (
    background_priority,
    prune_scheduled,
    sessions_close_idle,
    task_seconds,
)
from checkpoints.services.throttling import counters_delete_expired


def checkpoint_flush_task(session_id: int) -> int:
    """What versions before the flush batches queued, one per mark: still in a queue after
    an upgrade, or queued by a web host not yet upgraded. Writes every checkpoint due."""
    return checkpoints_flush_due()


def checkpoints_flush_marked_task(marked_before: float) -> int:
    """Queued by the hook path for the marks a web process makes before ``marked_before`` (a
    Unix time): once they are past their debounce, write every checkpoint due (how many)."""
    return checkpoints_flush_marked(marked_before=marked_before)


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
