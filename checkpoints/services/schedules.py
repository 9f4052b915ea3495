"""The django-q2 schedules the service relies on, registered idempotently from the config.

``schedules_ensure`` is run by ``manage.py setup_schedules`` (which ``make run`` calls) and
again whenever the continuity settings are saved, so a changed prune cadence takes effect
without a restart. Schedules are found by name; ours all start with ``signet: ``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django_q.models import Schedule

from checkpoints.models import ContinuityConfig

PREFIX = "signet: "
SWEEP = PREFIX + "flush pending checkpoints"
PRUNE = PREFIX + "prune checkpoints"
IDLE_CLOSE = PREFIX + "close idle sessions"
IDLE_CHECK_MINUTES = 5


@dataclass(frozen=True)
class ScheduleState:
    name: str
    func: str
    minutes: int
    next_run: datetime | None
    change: str  # created, updated, unchanged or removed


def schedules_wanted(config: ContinuityConfig) -> dict[str, dict[str, Any]]:
    """Every schedule by name, with the fields the config gives it."""

    def every(func: str, minutes: int) -> dict[str, Any]:
        return {"func": func, "schedule_type": Schedule.MINUTES, "minutes": minutes}

    return {
        SWEEP: every("checkpoints.tasks.checkpoints_sweep_task", 1),
        PRUNE: every("checkpoints.tasks.retention_prune_task", config.prune_interval_minutes),
        IDLE_CLOSE: every("checkpoints.tasks.sessions_close_idle_task", IDLE_CHECK_MINUTES),
    }


def schedules_ensure(*, config: ContinuityConfig) -> list[ScheduleState]:
    """Create, update or remove our schedules so exactly one per task matches the config.

    A schedule whose cadence shortened runs no later than one new interval from now; one
    that is already right is left untouched (its next run included).
    """
    now = timezone.now()
    states = []
    wanted = schedules_wanted(config)
    for name, fields in wanted.items():
        found = list(Schedule.objects.filter(name=name).order_by("pk"))
        for extra in found[1:]:  # duplicates from a race or a hand-made copy
            extra.delete()
        schedule = found[0] if found else None
        if schedule is None:
            # The first run comes one interval after registration: a fresh install has
            # nothing to prune, and a restart must not prune at once.
            first = now + timedelta(minutes=fields["minutes"])
            schedule = Schedule.objects.create(name=name, repeats=-1, next_run=first, **fields)
            change = "created"
        elif any(getattr(schedule, key) != value for key, value in fields.items()) or (
            schedule.repeats != -1
        ):
            for key, value in fields.items():
                setattr(schedule, key, value)
            schedule.repeats = -1
            soonest = now + timedelta(minutes=fields["minutes"])
            if schedule.next_run is None or schedule.next_run > soonest:
                schedule.next_run = soonest
            schedule.save()
            change = "updated"
        else:
            change = "unchanged"
        states.append(
            ScheduleState(name, schedule.func, fields["minutes"], schedule.next_run, change)
        )
    for stale in Schedule.objects.filter(name__startswith=PREFIX).exclude(name__in=list(wanted)):
        states.append(ScheduleState(stale.name, stale.func, stale.minutes or 0, None, "removed"))
        stale.delete()
    return states
