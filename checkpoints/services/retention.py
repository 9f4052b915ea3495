"""Retention: the prune (checkpoint age, session age, per-session cap) and the idle-session close.

The prune applies three rules, with cutoffs fixed when the run begins. Each rule leaves out
what an earlier one takes, so they never overlap, and a dry run predicts the real run exactly
(rows written meanwhile aside):

1. ``session_age``: a session whose last activity is older than ``session_retention_days``
   goes, with all its checkpoints and injections.
2. ``age``: a checkpoint older than ``retention_days`` goes, unless it is the most recent of
   its session (that one stays as the session's record).
3. ``cap``: a session over ``max_checkpoints_per_session`` (a cap lowered after it filled)
   loses its oldest checkpoints beyond the cap that rule 2 did not already take.

Rows are selected in keyset order, a bounded batch at a time, and each batch is deleted in
its own short transaction, so memory stays flat and hook writes queue behind one batch at
most. The dry run walks exactly the same rows and only skips the deletes.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.core.cache import cache
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
from checkpoints.services.store import checkpoints_delete_ids, session_close

logger = logging.getLogger(__name__)

PRUNE_TASK = "checkpoints.tasks.retention_prune_task"
PRUNE_LEASE_KEY = "signet:retention:prune-lease"
BATCH_SIZE = 1000  # rows per delete transaction, at most
SESSION_BATCH_SIZE = 200  # sessions looked at per step of the session rules
# SQLite space is handed back a few pages (of 4 KiB) per write transaction, starting here.
VACUUM_FIRST_STEP_PAGES = 64
# The pruner's SQLite page cache: the indexes it walks stay in memory between batches.
CACHE_KIB = 32 * 1024


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


def prune_run(
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    batch_size: int = BATCH_SIZE,
    config: ContinuityConfig | None = None,
    max_seconds: float | None = None,
) -> PruneReport:
    """Apply the retention policy (see the module docstring); with ``dry_run``, delete nothing.

    The dry run and the real run walk the same rows; only the deletes differ. A real run
    is recorded as a ``RetentionRun``, then hands freed space back (SQLite). With
    ``max_seconds`` it stops between batches once that time is spent (``complete`` is then
    False): what is left stays for the next run.
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
    deadline = None if max_seconds is None else began + max_seconds
    with contextlib.ExitStack() as stack:
        if not dry_run and not stack.enter_context(_prune_lease()):
            report.skipped = True
            return report
        deleter = stack.enter_context(
            _Deleter.open(dry_run=dry_run, batch_size=batch_size, deadline=deadline)
        )
        _prune_expired_sessions(report, deleter, cutoff=session_cutoff)
        live = Checkpoint.objects.filter(session__last_activity_at__gte=session_cutoff)
        for rows, victims in _age_batches(live, deleter, cutoff=checkpoint_cutoff):
            report.rules[Rule.AGE].add(deleter.checkpoints(rows, victims))
        for rows in _cap_batches(
            live, deleter, cap=config.max_checkpoints_per_session, cutoff=checkpoint_cutoff
        ):
            # Re-checked: never a session's latest, whatever was deleted meanwhile.
            victims = partial(
                Checkpoint.objects.filter, _newer_in_session(), id__in=[row.id for row in rows]
            )
            report.rules[Rule.CAP].add(deleter.checkpoints(rows, victims))
        report.hook_deliveries = deleter.rows(
            HookDelivery.objects.filter(created_at__lt=checkpoint_cutoff)
        )
        report.complete = not deleter.out_of_time
        if not dry_run:
            # The run history goes with the sessions it describes.
            RetentionRun.objects.filter(started_at__lt=session_cutoff).delete()
            if report.complete:  # else the continuation hands the space back
                report.bytes_reclaimed = database_space_reclaim(deadline=deadline)
            report.duration_seconds = time.monotonic() - began
            _record(report)
    report.duration_seconds = time.monotonic() - began
    return report


@contextmanager
def _prune_lease() -> Iterator[bool]:
    """One real prune at a time, across workers and hosts (the shared cache): a scheduled
    run, its continuation and a hand-run command must not delete side by side. Yields
    False when another prune holds the lease; it expires with django-q2's task limit."""
    token = uuid.uuid4().hex
    held = cache.add(PRUNE_LEASE_KEY, token, timeout=int(settings.Q_CLUSTER["timeout"]) + 30)
    try:
        yield held
    finally:
        if held and cache.get(PRUNE_LEASE_KEY) == token:
            cache.delete(PRUNE_LEASE_KEY)


def prune_scheduled() -> PruneReport:
    """The scheduled prune: at background CPU priority and within the task time limit.

    django-q2 stops a task after ``Q_CLUSTER["timeout"]`` seconds; the prune stops itself
    well before, and when there was more to delete than fits (a first run on a large
    database, a shortened retention) it queues its own continuation.
    """
    from django_q.tasks import async_task

    background_priority()
    report = prune_run(max_seconds=task_seconds())
    if not report.complete and not report.skipped:
        async_task(PRUNE_TASK, task_name="retention-prune-continued")
    return report


def task_seconds() -> float:
    """How long a scheduled retention task may run: three quarters of django-q2's limit."""
    return float(settings.Q_CLUSTER["timeout"]) * 0.75


def background_priority() -> None:
    """Lower this process's CPU priority to ``SIGNET_BACKGROUND_NICENESS`` (once; the
    kernel lets a process lower its priority, not raise it again).

    Retention runs beside the web workers on the same cores: measured in bench/prune.py,
    the hooks' p99 during a prune is steadier when the prune yields the CPU to them. Only
    background processes call this: the prune command, and the django-q2 worker, which
    then keeps the lower priority for its life (until django-q2 recycles it) for its other
    background tasks too. Those hold the write lock only briefly, and a process waiting
    for that lock leaves the CPU to whoever holds it.
    """
    target = settings.SIGNET_BACKGROUND_NICENESS
    current = os.nice(0)
    if target > current:
        os.nice(target - current)


class _Deleter:
    """Deletes one batch per short write transaction, or, in a dry run, only counts.

    The batch size adapts so that a transaction holds the write lock for about
    ``TARGET_SECONDS`` (between ``MIN_BATCH`` and the size asked for): how long a batch takes
    depends on the database, the rows' size and the indexes, and a hook waiting behind it
    must not notice. On SQLite the write-ahead log is copied back into the file between
    batches, outside the lock, rather than by whichever commit (often a hook's) crosses the
    auto-checkpoint threshold.
    """

    TARGET_SECONDS = 0.005
    MIN_BATCH = 50

    def __init__(self, *, dry_run: bool, batch_size: int, deadline: float | None) -> None:
        self.dry_run = dry_run
        self.deadline = deadline
        self.batches = 0
        self.most = max(1, batch_size)
        # A dry run walks in full batches; a real one starts small and grows to the target.
        self.size = self.most if dry_run else min(self.MIN_BATCH, self.most)
        self._wal = not dry_run and connection.vendor == "sqlite" and not connection.in_atomic_block

    @classmethod
    @contextmanager
    def open(cls, *, dry_run: bool, batch_size: int, deadline: float | None) -> Iterator[_Deleter]:
        deleter = cls(dry_run=dry_run, batch_size=batch_size, deadline=deadline)
        if not deleter._wal:
            yield deleter
            return
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_autocheckpoint")
            previous = cursor.fetchone()[0]
            cursor.execute("PRAGMA wal_autocheckpoint = 0")
            cursor.execute("PRAGMA cache_size")
            cache_pages = cursor.fetchone()[0]
            cursor.execute(f"PRAGMA cache_size = {-CACHE_KIB}")
        try:
            yield deleter
        finally:
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA wal_autocheckpoint = {int(previous)}")
                cursor.execute(f"PRAGMA cache_size = {int(cache_pages)}")

    @property
    def out_of_time(self) -> bool:
        """The run's time is spent: walks stop before their next batch. Every run deletes
        at least one batch first, so runs that continue each other always finish."""
        return self.deadline is not None and self.batches > 0 and time.monotonic() >= self.deadline

    def _timed(self, delete: Callable[[], int]) -> int:
        with write_serialized():
            began = time.monotonic()  # the lock's hold, not the wait for it
            with transaction.atomic():
                done = delete()
            took = time.monotonic() - began
        self.batches += 1
        if done:
            per_row = took / done
            self.size = max(
                min(self.MIN_BATCH, self.most), min(self.most, int(self.TARGET_SECONDS / per_row))
            )
        if self._wal:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        # Leave the writers time to catch up: the prune is background work.
        time.sleep(took * settings.SIGNET_PRUNE_PAUSE_RATIO)
        return done

    def checkpoints(
        self, rows: list[_Row], victims: Callable[[], QuerySet[Checkpoint]]
    ) -> list[_Row]:
        """Delete ``rows``; ``victims`` gives them again inside the write transaction, with
        their rule checked anew (and rows locked where it needs). Returns the rows deleted."""
        if self.dry_run:
            self.batches += 1
            return rows
        ids: list[uuid.UUID] = []

        def delete() -> int:
            ids.extend(victims().values_list("id", flat=True))
            return checkpoints_delete_ids(ids=ids)

        self._timed(delete)
        if len(ids) == len(rows):
            return rows
        # A concurrent write changed the picture (a newer checkpoint was deleted, a session
        # came back to life): count only what really went.
        gone = set(ids)
        return [row for row in rows if row.id in gone]

    def rows(
        self,
        rows: QuerySet[Any],
        within: Callable[[QuerySet[Any]], QuerySet[Any]] = lambda batch: batch,
    ) -> int:
        """Delete ``rows`` of a model that nothing references, a batch at a time; ``within``
        narrows a batch inside its transaction (a re-check)."""
        total = 0
        for pks in _keyset_pks(rows, self):
            if self.dry_run:
                self.batches += 1
                total += len(pks)
                continue

            def delete(pks: list[Any] = pks) -> int:
                batch = within(rows.filter(pk__in=pks))
                deleted: int | None = batch._raw_delete(batch.db)
                return deleted or 0  # None: the re-check left nothing to delete

            total += self._timed(delete)
        return total

    def sessions(self, pick: Callable[[], list[int]], count: int) -> int:
        """Delete the sessions ``pick`` returns inside the transaction (their checkpoints and
        injections went before); a dry run counts ``count``."""
        if self.dry_run:
            return count

        def delete() -> int:
            _, per_model = Session.objects.filter(pk__in=pick()).only("id").delete()
            return per_model.get(Session._meta.label, 0)

        return self._timed(delete)


def _prune_expired_sessions(report: PruneReport, deleter: _Deleter, *, cutoff: datetime) -> None:
    """Rule 1: sessions idle past ``cutoff``, in steps of a few sessions: their checkpoints
    and injections in batches first, then the session rows themselves.

    Every batch first locks the sessions of its step that are still expired: a hook that
    brings one back to life holds the same row lock (PostgreSQL; on SQLite all writers
    queue anyway), so a session is never pruned under a hook that is resuming it.
    """
    expired = Session.objects.filter(last_activity_at__lt=cutoff)
    for session_ids in _keyset_pks(expired, SESSION_BATCH_SIZE):

        def still_expired(session_ids: list[int] = session_ids) -> list[int]:
            locked = expired.select_for_update().filter(pk__in=session_ids)
            return list(locked.values_list("pk", flat=True))

        owned = Checkpoint.objects.filter(session_id__in=session_ids)
        for rows in _keyset_rows(owned, deleter):
            ids = [row.id for row in rows]

            def victims(ids: list[uuid.UUID] = ids) -> QuerySet[Checkpoint]:
                return Checkpoint.objects.filter(session_id__in=still_expired(), id__in=ids)

            report.rules[Rule.SESSION_AGE].add(deleter.checkpoints(rows, victims))
        report.injections += deleter.rows(
            Injection.objects.filter(session_id__in=session_ids),
            within=lambda batch: batch.filter(session_id__in=still_expired()),
        )
        if deleter.out_of_time:  # the sessions go once nothing of theirs is left
            return
        report.sessions += deleter.sessions(still_expired, len(session_ids))


def _newer_in_session() -> Exists:
    """A checkpoint of the same session that is newer (by time, then id)."""
    return Exists(
        Checkpoint.objects.filter(session_id=OuterRef("session_id")).filter(
            Q(created_at__gt=OuterRef("created_at"))
            | Q(created_at=OuterRef("created_at"), id__gt=OuterRef("id"))
        )
    )


def _age_batches(
    live: QuerySet[Checkpoint], deleter: _Deleter, *, cutoff: datetime
) -> Iterator[tuple[list[_Row], Callable[[], QuerySet[Checkpoint]]]]:
    """Rule 2: checkpoints older than ``cutoff`` that have a newer one in their session.

    Yields each batch with the queryset that deletes it: the same condition, so a checkpoint
    that became its session's latest in the meantime is kept.
    """
    candidates = live.filter(_newer_in_session(), created_at__lt=cutoff)
    for rows in _keyset_rows(candidates, deleter):
        yield rows, partial(candidates.filter, id__in=[row.id for row in rows])


def _cap_batches(
    live: QuerySet[Checkpoint], deleter: _Deleter, *, cap: int, cutoff: datetime
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
        if not session_ids or deleter.out_of_time:
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
            for rows in _keyset_rows(older, deleter):
                pending.extend(rows)
                while len(pending) >= deleter.size:
                    yield pending[: deleter.size]
                    pending = pending[deleter.size :]
    if pending:
        yield pending


def _keyset_rows(rows: QuerySet[Checkpoint], deleter: _Deleter) -> Iterator[list[_Row]]:
    """``rows`` in id order, a batch at a time; each query starts after the last id seen,
    so the walk is the same whether or not the previous batch was deleted."""
    last: uuid.UUID | None = None
    while not deleter.out_of_time:
        page = rows.order_by("id")
        if last is not None:
            page = page.filter(id__gt=last)
        found = [
            _Row(*values)
            for values in page.values_list("id", "project_normalized", "created_at")[: deleter.size]
        ]
        if not found:
            return
        yield found
        last = found[-1].id


def _keyset_pks(rows: QuerySet[Any], batch: _Deleter | int) -> Iterator[list[Any]]:
    last = None
    while isinstance(batch, int) or not batch.out_of_time:
        page = rows.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        size = batch if isinstance(batch, int) else batch.size
        found = list(page.values_list("pk", flat=True)[:size])
        if not found:
            return
        yield found
        last = found[-1]


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


def database_space_reclaim(*, deadline: float | None = None) -> int | None:
    """After a prune, on SQLite: refresh the planner's statistics and hand the freed pages
    back to the file system, a few at a time (each step holds the write lock about as long
    as a delete batch), until none are free or ``deadline`` (``time.monotonic()``) passes;
    the next run goes on. Returns the bytes returned.

    On PostgreSQL nothing is done: autovacuum makes freed space reusable on its own. Space
    goes back on SQLite only when the file uses incremental auto-vacuum, which
    ``sqlite_prepare`` sets up (``manage.py serve`` runs it).
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return None
    with connection.cursor() as cursor:
        with write_serialized():
            # Statistics from a bounded sample: a full ANALYZE of a large table would hold
            # the write lock for seconds.
            cursor.execute("PRAGMA analysis_limit = 1000")
            cursor.execute("PRAGMA optimize")
            cursor.execute("PRAGMA analysis_limit = 0")
        cursor.execute("PRAGMA auto_vacuum")
        if cursor.fetchone()[0] != SQLITE_AUTO_VACUUM_INCREMENTAL:
            return None
        cursor.execute("PRAGMA page_size")
        page_size = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_count")
        pages_before = cursor.fetchone()[0]
        step = VACUUM_FIRST_STEP_PAGES
        while deadline is None or time.monotonic() < deadline:
            cursor.execute("PRAGMA freelist_count")
            free = cursor.fetchone()[0]
            if not free:
                break
            began = time.monotonic()
            with write_serialized():
                # One statement frees one page per step: executescript steps it to the end
                # (a cursor's execute would stop after the first page).
                cursor.connection.executescript(f"PRAGMA incremental_vacuum({min(free, step)})")
            took = time.monotonic() - began
            # Moving a page costs more the larger the file: size the next step to hold the
            # write lock about as long as a delete batch.
            step = max(16, min(4096, int(step * _Deleter.TARGET_SECONDS / max(took, 1e-4))))
            time.sleep(took * settings.SIGNET_PRUNE_PAUSE_RATIO)
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


def sessions_close_idle(
    *, now: datetime | None = None, max_seconds: float | None = None
) -> IdleReport:
    """End every live session with no event for ``idle_session_minutes``.

    Each is ended in its own transaction holding its row, as a SessionEnd would: its pending
    checkpoint is written first, and a final one if anything changed. The run is recorded.
    With ``max_seconds`` it stops once that time is spent; the next run goes on.
    """
    config = config_get()
    now = now or timezone.now()
    began = time.monotonic()
    cutoff = now - config.idle_session
    idle = Session.objects.filter(ended_at__isnull=True, last_activity_at__lt=cutoff)
    report = IdleReport()
    for session_ids in _keyset_pks(idle, SESSION_BATCH_SIZE):
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
