"""The django-q2 schedules the service relies on, registered idempotently."""

from __future__ import annotations

from django_q.models import Schedule

SCHEDULES = {
    "signet: flush pending checkpoints": {
        "func": "checkpoints.tasks.checkpoints_sweep_task",
        "schedule_type": Schedule.MINUTES,
        "minutes": 1,
    },
}


def schedules_ensure() -> list[str]:
    """Create or update every schedule in ``SCHEDULES``; return the names written."""
    written = []
    for name, fields in SCHEDULES.items():
        schedule = Schedule.objects.filter(name=name).first()
        if schedule is None:
            Schedule.objects.create(name=name, repeats=-1, **fields)
            written.append(name)
        elif any(getattr(schedule, key) != value for key, value in fields.items()):
            for key, value in fields.items():
                setattr(schedule, key, value)
            schedule.save()
            written.append(name)
    return written
