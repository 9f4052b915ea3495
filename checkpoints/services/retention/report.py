"""What a prune removed (or would remove), rule by rule: the report it prints and records."""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Rule(enum.StrEnum):
    SESSION_AGE = "session_age"
    AGE = "age"
    CAP = "cap"


RULE_TITLES = {
    Rule.SESSION_AGE: "session age (whole sessions)",
    Rule.AGE: "checkpoint age",
    Rule.CAP: "per-session cap",
}


@dataclass(frozen=True)
class Row:
    id: uuid.UUID
    project: str
    created_at: datetime


@dataclass
class RuleTally:
    """What one rule removed (or would remove): counts by project, oldest and newest."""

    checkpoints: int = 0
    by_project: Counter[str] = field(default_factory=Counter)
    oldest: datetime | None = None
    newest: datetime | None = None

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            self.checkpoints += 1
            self.by_project[row.project or "(no project)"] += 1
            if self.oldest is None or row.created_at < self.oldest:
                self.oldest = row.created_at
            if self.newest is None or row.created_at > self.newest:
                self.newest = row.created_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "by_project": dict(self.by_project.most_common()),
            "oldest": self.oldest.isoformat() if self.oldest else None,
            "newest": self.newest.isoformat() if self.newest else None,
        }


@dataclass
class PruneReport:
    """A prune run, real or dry: the policy it applied and what it removed, rule by rule."""

    dry_run: bool
    now: datetime
    retention_days: int
    session_retention_days: int
    max_checkpoints_per_session: int
    rules: dict[Rule, RuleTally] = field(default_factory=lambda: {r: RuleTally() for r in Rule})
    sessions: int = 0
    injections: int = 0
    hook_deliveries: int = 0
    duration_seconds: float = 0.0
    bytes_reclaimed: int | None = None
    complete: bool = True  # False: stopped at its time budget, the rest left for next time
    skipped: bool = False  # another prune was running: this one did nothing

    @property
    def checkpoints(self) -> int:
        return sum(tally.checkpoints for tally in self.rules.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "policy": {
                "retention_days": self.retention_days,
                "session_retention_days": self.session_retention_days,
                "max_checkpoints_per_session": self.max_checkpoints_per_session,
            },
            "rules": {str(rule): tally.as_dict() for rule, tally in self.rules.items()},
            "sessions": self.sessions,
            "injections": self.injections,
            "hook_deliveries": self.hook_deliveries,
            "complete": self.complete,
            "skipped": self.skipped,
        }

    def lines(self, *, projects: int = 10) -> list[str]:
        """The report as text, for the command and the admin's preview."""
        if self.skipped:
            return ["Another prune is running; this one did nothing."]
        verb = "would delete" if self.dry_run else "deleted"
        lines = [
            f"Prune {'(dry run) ' if self.dry_run else ''}at {self.now:%Y-%m-%d %H:%M:%S %Z}: "
            f"checkpoints older than {self.retention_days} d (each session's latest kept), "
            f"sessions idle over {self.session_retention_days} d, "
            f"at most {self.max_checkpoints_per_session} checkpoints a session.",
        ]
        for rule, tally in self.rules.items():
            line = f"  {RULE_TITLES[rule]}: {verb} {tally.checkpoints} checkpoint(s)"
            if rule is Rule.SESSION_AGE:
                line += f" of {self.sessions} session(s), with {self.injections} injection(s)"
            lines.append(line)
            if tally.checkpoints:
                span = f"{tally.oldest:%Y-%m-%d %H:%M} to {tally.newest:%Y-%m-%d %H:%M}"
                lines.append(f"    created {span}")
                for project, count in tally.by_project.most_common(projects):
                    lines.append(f"    {count:>8}  {project}")
                if len(tally.by_project) > projects:
                    lines.append(f"    … and {len(tally.by_project) - projects} more project(s)")
        lines.append(
            f"  total: {verb} {self.checkpoints} checkpoint(s), {self.sessions} session(s), "
            f"{self.injections} injection(s), {self.hook_deliveries} idempotency key(s)"
        )
        if not self.dry_run:
            reclaimed = (
                "" if self.bytes_reclaimed is None else f", {self.bytes_reclaimed:,} bytes returned"
            )
            lines.append(f"  took {self.duration_seconds:.2f} s{reclaimed}")
        if not self.complete:
            lines.append(
                "  stopped at its time budget: the counts are partial"
                + ("" if self.dry_run else "; the rest goes in the next run")
            )
        return lines
