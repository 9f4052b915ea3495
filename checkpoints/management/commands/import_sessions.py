"""``manage.py import_sessions {signet,claude-code,openclaw} PATH --user NAME``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.services.imports import ImportReport
from checkpoints.services.imports.claude_code import claude_code_import, claude_code_paths
from checkpoints.services.imports.openclaw import openclaw_import, openclaw_sources
from checkpoints.services.imports.signet import ExportFormatError, signet_import

KINDS = ("signet", "claude-code", "openclaw")
BAR_WIDTH = 30


class Progress:
    """``\\r``-updated bar on a terminal; on anything else, nothing until the summary."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream, self.total, self.done = stream, total, 0
        self.live = stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.live:
            return
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        self.stream.write(
            f"\r[{'#' * filled}{' ' * (BAR_WIDTH - filled)}] {self.done}/{self.total} "
            f"{label[-40:]:<40}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.live and self.total:
            self.stream.write("\n")
            self.stream.flush()


class Command(BaseCommand):
    help = (
        "Import sessions into a user's account: a session export (signet), Claude Code "
        "transcripts (a ~/.claude/projects folder, one project folder or one .jsonl) or an "
        "OpenClaw agent's sessions.json with its JSONL transcripts. Re-importing adds nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=KINDS, help="What PATH holds.")
        parser.add_argument("path", help="The file or folder to import.")
        parser.add_argument("--user", required=True, help="The owner's username.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            owner = get_user_model().objects.get(username=options["user"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user {options['user']!r}.") from None
        path = Path(options["path"]).expanduser()
        if not path.exists():
            raise CommandError(f"{path} does not exist.")
        jobs = self._jobs(options["kind"], owner, path)
        report = ImportReport()
        progress = Progress(sys.stderr, len(jobs))
        try:
            for label, job in jobs:
                report.add(job())
                progress.step(label)
        finally:
            progress.close()
        for problem in report.problems:
            self.stderr.write(f"  {problem}")
        self.stdout.write(report.summary())

    def _jobs(
        self, kind: str, owner: User, path: Path
    ) -> list[tuple[str, Callable[[], ImportReport]]]:
        if kind == "signet":
            return [(path.name, partial(self._signet, owner, path))]
        if kind == "claude-code":
            files = claude_code_paths(path=path)
            if not files:
                raise CommandError(f"No Claude Code transcript (*.jsonl) under {path}.")
            return [
                (file.name, partial(claude_code_import, owner=owner, path=file)) for file in files
            ]
        sources, problems = openclaw_sources(path=path)
        if not sources and problems:
            raise CommandError("; ".join(problems))
        jobs: list[tuple[str, Callable[[], ImportReport]]] = [
            (source.transcript.name, partial(openclaw_import, owner=owner, source=source))
            for source in sources
        ]
        if problems:
            jobs.append(("store", partial(ImportReport, problems=problems)))
        return jobs

    def _signet(self, owner: User, path: Path) -> ImportReport:
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: cannot read the export ({exc})") from None
        documents = document if isinstance(document, list) else [document]
        report = ImportReport()
        for item in documents:
            try:
                report.add(signet_import(owner=owner, document=item))
            except ExportFormatError as exc:
                raise CommandError(f"{path}: {exc}") from None
        return report
