"""``manage.py prune_checkpoints [--dry-run]``: apply the retention policy now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from checkpoints.services.retention import BATCH_SIZE, background_priority, prune_run


class Command(BaseCommand):
    help = (
        "Delete what the retention policy says to (checkpoint age, session age, per-session "
        "cap), in small batches. --dry-run prints exactly what a real run would delete."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would go; delete nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH_SIZE,
            help=f"Rows per delete transaction at most (default {BATCH_SIZE}); batches are "
            "sized to hold the write lock about 5 ms.",
        )
        parser.add_argument(
            "--projects", type=int, default=10, help="Projects listed per rule (default 10)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["dry_run"]:
            background_priority()
        report = prune_run(dry_run=options["dry_run"], batch_size=max(1, options["batch_size"]))
        self.stdout.write("\n".join(report.lines(projects=options["projects"])))
