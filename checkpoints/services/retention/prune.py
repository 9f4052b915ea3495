"""The prune: three retention rules walked in keyset batches, deleted in short transactions."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from checkpoints.services.retention.report import PruneReport, Row, Rule
from checkpoints.services.retention.space import LOCK_TARGET_SECONDS, database_space_reclaim
from checkpoints.services.store import checkpoints_delete_ids

logger = logging.getLogger(__name__)

PRUNE_TASK = "checkpoints.tasks.retention_prune_task"
PRUNE_LEASE_KEY = "signet:retention:prune-lease"
BATCH_SIZE = 1000  # rows per delete transaction, at most
SESSION_BATCH_SIZE = 200  # sessions looked at per step of the session rules
# The pruner's SQLite page cache: the indexes it walks stay in memory between batches.
CACHE_KIB = 32 * 1024


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

    TARGET_SECONDS = LOCK_TARGET_SECONDS
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
        self, rows: list[Row], victims: Callable[[], QuerySet[Checkpoint]]
    ) -> list[Row]:
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
        for pks in keyset_pks(rows, self):
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
    for session_ids in keyset_pks(expired, SESSION_BATCH_SIZE):

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
) -> Iterator[tuple[list[Row], Callable[[], QuerySet[Checkpoint]]]]:
    """Rule 2: checkpoints older than ``cutoff`` that have a newer one in their session.

    Yields each batch with the queryset that deletes it: the same condition, so a checkpoint
    that became its session's latest in the meantime is kept.
    """
    candidates = live.filter(_newer_in_session(), created_at__lt=cutoff)
    for rows in _keyset_rows(candidates, deleter):
        yield rows, partial(candidates.filter, id__in=[row.id for row in rows])


def _cap_batches(
    live: QuerySet[Checkpoint], deleter: _Deleter, *, cap: int, cutoff: datetime
) -> Iterator[list[Row]]:
    """Rule 3: in each session over ``cap``, the checkpoints older than its ``cap``-th newest
    that rule 2 leaves (not older than ``cutoff``)."""
    over = (
        live.values("session_id")
        .annotate(total=Count("id"))
        .filter(total__gt=cap)
        .order_by("session_id")
    )
    pending: list[Row] = []
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


def _keyset_rows(rows: QuerySet[Checkpoint], deleter: _Deleter) -> Iterator[list[Row]]:
    """``rows`` in id order, a batch at a time; each query starts after the last id seen,
    so the walk is the same whether or not the previous batch was deleted."""
    last: uuid.UUID | None = None
    while not deleter.out_of_time:
        page = rows.order_by("id")
        if last is not None:
            page = page.filter(id__gt=last)
        found = [
            Row(*values)
            for values in page.values_list("id", "project_normalized", "created_at")[: deleter.size]
        ]
        if not found:
            return
        yield found
        last = found[-1].id


def keyset_pks(rows: QuerySet[Any], batch: _Deleter | int) -> Iterator[list[Any]]:
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


# A preview runs inside a web request: it stops well before a client or a proxy gives up (30 s).
PREVIEW_SECONDS = 15.0


def prune_preview() -> PruneReport:
    """What the next prune would delete, as a dry run bounded for a web request (the admin's
    settings page and the dashboard's retention page); ``complete`` says if it got through."""
    return prune_run(dry_run=True, max_seconds=PREVIEW_SECONDS)
