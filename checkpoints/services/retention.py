"""Retention: the prune (checkpoint age, session age, per-session cap) and the idle-session close.

The prune applies three rules, each to the state as it was when the run began, so they never
overlap and a dry run predicts the real run exactly:

1. ``session_age``: a session whose last activity is older than ``session_retention_days``
   goes, with all its checkpoints and injections.
2. ``age``: a checkpoint older than ``retention_days`` goes, unless it is the most recent of
   its session (that one stays as the session's record).
3. ``cap``: a session over ``max_checkpoints_per_session`` (a cap lowered after it filled)
   loses its oldest checkpoints beyond the cap that rule 2 did not already take.

Rows are selected in keyset order, a bounded batch at a time, and each batch is deleted in
its own short transaction, so memory stays flat and hook writes queue behind one batch at
most. The dry run walks exactly the same batches and only skips the deletes.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from checkpoints.models import (
    Checkpoint,
    ContinuityConfig,
    HookDelivery,
    Injection,
    RetentionRun,
    Session,
)
from checkpoints.services.config import config_get
from checkpoints.services.locks import write_serialized
from checkpoints.services.store import session_close

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000  # rows per delete transaction
SESSION_BATCH_SIZE = 200  # sessions looked at per step of the session rules
# SQLite space is handed back this many pages (of 4 KiB) per write transaction.
VACUUM_STEP_PAGES = 2048


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
class _Row:
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

    def add(self, rows: list[_Row]) -> None:
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
        }

    def lines(self, *, projects: int = 10) -> list[str]:
        """The report as text, for the command and the admin's preview."""
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
        return lines


def prune_run(
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    batch_size: int = BATCH_SIZE,
    config: ContinuityConfig | None = None,
) -> PruneReport:
    """Apply the retention policy (see the module docstring); with ``dry_run``, delete nothing.

    The dry run and the real run walk the same batches; only the deletes differ. A real run
    is recorded as a ``RetentionRun``, then hands freed space back (SQLite).
    """
    config = config or config_get()
    now = now or timezone.now()
    began = time.monotonic()
    report = PruneReport(
        dry_run=dry_run,
        now=now,
        retention_days=config.retention_days,
        session_retention_days=config.session_retention_days,
        max_checkpoints_per_session=config.max_checkpoints_per_session,
    )
    session_cutoff = now - config.session_retention
    checkpoint_cutoff = now - config.retention
    _prune_expired_sessions(report, cutoff=session_cutoff, dry_run=dry_run, batch=batch_size)
    live = Checkpoint.objects.filter(session__last_activity_at__gte=session_cutoff)
    for rows, victims in _age_batches(live, cutoff=checkpoint_cutoff, batch=batch_size):
        report.rules[Rule.AGE].add(_delete_checkpoints(rows, victims, dry_run=dry_run))
    for rows in _cap_batches(
        live, cap=config.max_checkpoints_per_session, cutoff=checkpoint_cutoff, batch=batch_size
    ):
        victims = Checkpoint.objects.filter(id__in=[row.id for row in rows])
        report.rules[Rule.CAP].add(_delete_checkpoints(rows, victims, dry_run=dry_run))
    report.hook_deliveries = _delete_in_batches(
        HookDelivery.objects.filter(created_at__lt=checkpoint_cutoff), dry_run, batch_size
    )
    if not dry_run:
        # The run history goes with the sessions it describes.
        RetentionRun.objects.filter(started_at__lt=session_cutoff).delete()
        if report.checkpoints or report.sessions:
            report.bytes_reclaimed = database_space_reclaim()
    report.duration_seconds = time.monotonic() - began
    if not dry_run:
        _record(report)
    return report


def _prune_expired_sessions(
    report: PruneReport, *, cutoff: datetime, dry_run: bool, batch: int
) -> None:
    """Rule 1: sessions idle past ``cutoff``, in steps of a few sessions: their checkpoints
    and injections in batches first, then the session rows themselves."""
    expired = Session.objects.filter(last_activity_at__lt=cutoff)
    for session_ids in _keyset_pks(expired, SESSION_BATCH_SIZE):
        still_expired = Q(session__last_activity_at__lt=cutoff)
        owned = Checkpoint.objects.filter(session_id__in=session_ids)
        for rows in _keyset_rows(owned, batch):
            victims = Checkpoint.objects.filter(still_expired, id__in=[row.id for row in rows])
            report.rules[Rule.SESSION_AGE].add(_delete_checkpoints(rows, victims, dry_run=dry_run))
        report.injections += _delete_in_batches(
            Injection.objects.filter(still_expired, session_id__in=session_ids), dry_run, batch
        )
        sessions = Session.objects.filter(pk__in=session_ids, last_activity_at__lt=cutoff)
        if dry_run:
            report.sessions += len(session_ids)
        else:
            with write_serialized(), transaction.atomic():
                _, per_model = sessions.only("id").delete()
            report.sessions += per_model.get(Session._meta.label, 0)


def _newer_in_session() -> Exists:
    """A checkpoint of the same session that is newer (by time, then id)."""
    return Exists(
        Checkpoint.objects.filter(session_id=OuterRef("session_id")).filter(
            Q(created_at__gt=OuterRef("created_at"))
            | Q(created_at=OuterRef("created_at"), id__gt=OuterRef("id"))
        )
    )


def _age_batches(
    live: QuerySet[Checkpoint], *, cutoff: datetime, batch: int
) -> Iterator[tuple[list[_Row], QuerySet[Checkpoint]]]:
    """Rule 2: checkpoints older than ``cutoff`` that have a newer one in their session.

    Yields each batch with the queryset that deletes it: the same condition, so a checkpoint
    that became its session's latest in the meantime is kept.
    """
    candidates = live.filter(_newer_in_session(), created_at__lt=cutoff)
    for rows in _keyset_rows(candidates, batch):
        yield rows, candidates.filter(id__in=[row.id for row in rows])


def _cap_batches(
    live: QuerySet[Checkpoint], *, cap: int, cutoff: datetime, batch: int
) -> Iterator[list[_Row]]:
    """Rule 3: in each session over ``cap``, the checkpoints older than its ``cap``-th newest
    that rule 2 leaves (not older than ``cutoff``)."""
    over = (
        live.values("session_id")
        .annotate(total=Count("id"))
        .filter(total__gt=cap)
        .order_by("session_id")
    )
    pending: list[_Row] = []
    last_session = 0
    while True:
        session_ids = [
            row["session_id"]
            for row in over.filter(session_id__gt=last_session)[:SESSION_BATCH_SIZE]
        ]
        if not session_ids:
            break
        last_session = session_ids[-1]
        for session_id in session_ids:
            newest_first = Checkpoint.objects.filter(session_id=session_id).order_by(
                "-created_at", "-id"
            )
            edge = newest_first.values_list("created_at", "id")[cap - 1 : cap].first()
            if edge is None:  # fewer than cap since the count: nothing to trim
                continue
            edge_time, edge_id = edge
            older = Checkpoint.objects.filter(session_id=session_id, created_at__gte=cutoff).filter(
                Q(created_at__lt=edge_time) | Q(created_at=edge_time, id__lt=edge_id)
            )
            for rows in _keyset_rows(older, batch):
                pending.extend(rows)
                while len(pending) >= batch:
                    yield pending[:batch]
                    pending = pending[batch:]
    if pending:
        yield pending


def _keyset_rows(rows: QuerySet[Checkpoint], batch: int) -> Iterator[list[_Row]]:
    """``rows`` in id order, ``batch`` at a time; each query starts after the last id seen,
    so the walk is the same whether or not the previous batch was deleted."""
    last: uuid.UUID | None = None
    while True:
        page = rows.order_by("id")
        if last is not None:
            page = page.filter(id__gt=last)
        found = [
            _Row(*values)
            for values in page.values_list("id", "project_normalized", "created_at")[:batch]
        ]
        if not found:
            return
        yield found
        last = found[-1].id


def _keyset_pks(rows: QuerySet[Any], batch: int) -> Iterator[list[Any]]:
    last = None
    while True:
        page = rows.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        found = list(page.values_list("pk", flat=True)[:batch])
        if not found:
            return
        yield found
        last = found[-1]


def _delete_checkpoints(
    rows: list[_Row], victims: QuerySet[Checkpoint], *, dry_run: bool
) -> list[_Row]:
    """Delete ``victims`` (``rows``, rechecked) in one short transaction; the rows deleted."""
    if dry_run:
        return rows
    with write_serialized(), transaction.atomic():
        _, per_model = victims.only("id").delete()
    deleted = per_model.get(Checkpoint._meta.label, 0)
    if deleted == len(rows):
        return rows
    # A concurrent write changed the picture (a session came back to life): count only
    # what really went.
    kept = set(
        Checkpoint.objects.filter(id__in=[row.id for row in rows]).values_list("id", flat=True)
    )
    return [row for row in rows if row.id not in kept]


def _delete_in_batches(rows: QuerySet[Any], dry_run: bool, batch: int) -> int:
    total = 0
    for pks in _keyset_pks(rows, batch):
        if dry_run:
            total += len(pks)
            continue
        with write_serialized(), transaction.atomic():
            _, per_model = rows.filter(pk__in=pks).delete()
        total += per_model.get(rows.model._meta.label, 0)
    return total


def _record(report: PruneReport) -> RetentionRun:
    return RetentionRun.objects.create(
        kind=RetentionRun.Kind.PRUNE,
        started_at=report.now,
        duration_seconds=report.duration_seconds,
        checkpoints_by_age=report.rules[Rule.AGE].checkpoints,
        checkpoints_by_cap=report.rules[Rule.CAP].checkpoints,
        checkpoints_by_session_age=report.rules[Rule.SESSION_AGE].checkpoints,
        sessions_deleted=report.sessions,
        injections_deleted=report.injections,
        hook_deliveries_deleted=report.hook_deliveries,
        bytes_reclaimed=report.bytes_reclaimed,
        report=report.as_dict(),
    )


def database_size() -> dict[str, int] | None:
    """The database's size in bytes (and, on SQLite, the free space inside the file)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA freelist_count")
            free = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            size = cursor.fetchone()[0]
            return {"bytes": pages * size, "free_bytes": free * size}
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_database_size(current_database())")
            return {"bytes": int(cursor.fetchone()[0])}
    return None


def database_space_reclaim() -> int | None:
    """After a large delete: refresh the planner's statistics and, on SQLite, hand the freed
    pages back to the file system a few thousand at a time. Returns the bytes returned.

    PostgreSQL's autovacuum makes freed space reusable on its own; nothing is done there.
    Space is returned on SQLite only when the file uses incremental auto-vacuum, which
    ``sqlite_prepare`` sets up (``manage.py serve`` runs it).
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return None
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA optimize")
        cursor.execute("PRAGMA auto_vacuum")
        if cursor.fetchone()[0] != SQLITE_AUTO_VACUUM_INCREMENTAL:
            return None
        cursor.execute("PRAGMA page_size")
        page_size = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_count")
        pages_before = cursor.fetchone()[0]
        while True:
            cursor.execute("PRAGMA freelist_count")
            free = cursor.fetchone()[0]
            if not free:
                break
            with write_serialized():
                # One statement frees one page per step: executescript steps it to the end
                # (a cursor's execute would stop after the first page).
                cursor.connection.executescript(
                    f"PRAGMA incremental_vacuum({min(free, VACUUM_STEP_PAGES)})"
                )
            cursor.execute("PRAGMA freelist_count")
            if cursor.fetchone()[0] >= free:  # nothing more to hand back
                break
        cursor.execute("PRAGMA page_count")
        pages_after = cursor.fetchone()[0]
        # Copy the shrunk file from the write-ahead log into place, if no reader holds it.
        cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return int((pages_before - pages_after) * page_size)


SQLITE_AUTO_VACUUM_INCREMENTAL = 2


def sqlite_prepare() -> str:
    """Make the SQLite file return freed space on request (incremental auto-vacuum).

    A new file gets it from its first connection (settings); a file made before that needs
    one full ``VACUUM`` to switch, done here once. Returns what was done, for the log.
    """
    if connection.vendor != "sqlite":
        return ""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA auto_vacuum")
        if cursor.fetchone()[0] == SQLITE_AUTO_VACUUM_INCREMENTAL:
            return ""
        cursor.execute(f"PRAGMA auto_vacuum = {SQLITE_AUTO_VACUUM_INCREMENTAL}")
        with write_serialized():
            cursor.execute("VACUUM")
    return "switched the SQLite file to incremental auto-vacuum (one VACUUM)"


@dataclass
class IdleReport:
    closed: int = 0
    checkpoints: int = 0
    duration_seconds: float = 0.0


def sessions_close_idle(*, now: datetime | None = None) -> IdleReport:
    """End every live session with no event for ``idle_session_minutes``.

    Each is ended in its own transaction holding its row, as a SessionEnd would: its pending
    checkpoint is written first, and a final one if anything changed. The run is recorded.
    """
    config = config_get()
    now = now or timezone.now()
    began = time.monotonic()
    cutoff = now - config.idle_session
    idle = Session.objects.filter(ended_at__isnull=True, last_activity_at__lt=cutoff)
    report = IdleReport()
    for session_ids in _keyset_pks(idle, SESSION_BATCH_SIZE):
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
