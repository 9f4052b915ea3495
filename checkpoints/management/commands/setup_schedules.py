"""``manage.py setup_schedules``: register every django-q2 schedule, idempotently."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from checkpoints.services.config import config_get
from checkpoints.services.schedules import schedules_ensure


class Command(BaseCommand):
    help = (
        "Register the flush sweep, the prune and the idle-session close with django-q2, "
        "updated to the current continuity settings. Safe to run any number of times."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for state in schedules_ensure(config=config_get()):
            when = (
                f", next run {timezone.localtime(state.next_run):%Y-%m-%d %H:%M:%S %Z}"
                if state.next_run
                else ""
            )
            self.stdout.write(
                f"{state.change:>9}  {state.name}: {state.func} every {state.minutes} min{when}"
            )
