"""Ending sessions that went silent, as their harness's SessionEnd would have."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from checkpoints.models import RetentionRun, Session
from checkpoints.services.config import config_get
from checkpoints.services.locks import write_serialized
from checkpoints.services.retention.prune import SESSION_BATCH_SIZE, keyset_pks
from checkpoints.services.sessions import ACTIVITY_GRAIN
from checkpoints.services.store import session_close


@dataclass
class IdleReport:
    closed: int = 0
    checkpoints: int = 0
    duration_seconds: float = 0.0


def sessions_close_idle(
    *, now: datetime | None = None, max_seconds: float | None = None
) -> IdleReport:
    """End every live session with no event for ``idle_session_minutes`` (and at most
    ``ACTIVITY_GRAIN`` more).

    Each is ended in its own transaction holding its row, as a SessionEnd would: its pending
    checkpoint is written first, and a final one if anything changed. The run is recorded.
    With ``max_seconds`` it stops once that time is spent; the next run goes on.
    """
    config = config_get()
    now = now or timezone.now()
    began = time.monotonic()
    # The last activity is kept to ACTIVITY_GRAIN: a session is ended once it is idle for
    # at least the configured time, never before.
    cutoff = now - config.idle_session - ACTIVITY_GRAIN
    idle = Session.objects.filter(ended_at__isnull=True, last_activity_at__lt=cutoff)
    report = IdleReport()
    for session_ids in keyset_pks(idle, SESSION_BATCH_SIZE):
        if max_seconds is not None and time.monotonic() - began >= max_seconds:
            break
        for session_id in session_ids:
            with write_serialized(), transaction.atomic():
                # Re-checked under the lock: an event may have arrived since the look-up.
                session = idle.select_for_update().filter(pk=session_id).first()
                if session is None:
                    continue
                written = session_close(
                    session=session,
                    config=config,
                    now=now,
                    reason=Session.END_REASON_IDLE,
                    final=True,
                )
                session.save()
            report.closed += 1
            report.checkpoints += written is not None
    report.duration_seconds = time.monotonic() - began
    if report.closed:
        RetentionRun.objects.create(
            kind=RetentionRun.Kind.IDLE_CLOSE,
            started_at=now,
            duration_seconds=report.duration_seconds,
            sessions_closed=report.closed,
            report={"closed": report.closed, "checkpoints_written": report.checkpoints},
        )
    return report
