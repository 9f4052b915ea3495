"""Pending periodic checkpoints: marked on the hot path, written after the debounce.

The hook path only marks a session's periodic checkpoint as pending (``pending_mark_if_due``)
and sees to it that a flush task is queued (``pending_enqueue``). The write happens once
``debounce_seconds`` have passed since the mark, by whichever comes first: the session's next
event, a flush task, or the every-minute sweep. One rule, ``pending_due``, decides for all of
them; the session row lock makes sure one mark yields one checkpoint.

A web process queues at most one flush task per ``SIGNET_FLUSH_BATCH_SECONDS``: the marks it
makes meanwhile ride on the task already queued, which waits until the last of them is past
its debounce and then writes every checkpoint due. So the number of tasks grows with time,
not with the number of marks; each costs the cluster about a millisecond of CPU, whatever it
writes.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from datetime import datetime, timedelta
from functools import cache
from time import monotonic, sleep
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from checkpoints.models import Checkpoint, ContinuityConfig, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.locks import write_serialized
from checkpoints.services.sessions import session_save_changed, session_values
from checkpoints.services.store import checkpoint_build, checkpoint_save, checkpoint_write

if TYPE_CHECKING:
    from django_q.brokers import Broker

logger = logging.getLogger(__name__)

FLUSH_TASK = "checkpoints.tasks.checkpoints_flush_marked_task"
# A flush task waits out at most this much of a debounce (beyond its batch); the sweep covers
# anything longer.
MAX_DEBOUNCE_WAIT_SECONDS = 10.0
# Writes failing one after the other, after which a flush gives up on the rest.
FLUSH_FAILURES_IN_A_ROW = 3


def pending_cutoff(*, config: ContinuityConfig, now: datetime) -> datetime:
    """Marks made at or before this moment are past their debounce."""
    return now - timedelta(seconds=config.debounce_seconds)


def pending_due(*, pending_since: datetime | None, config: ContinuityConfig, now: datetime) -> bool:
    """Whether a pending mark made at ``pending_since`` may be written now."""
    return pending_since is not None and pending_since <= pending_cutoff(config=config, now=now)


def pending_mark_if_due(*, session: Session, config: ContinuityConfig, now: datetime) -> bool:
    """Mark a periodic checkpoint pending when one is due; True when this call marked it.

    Due: something changed since the last checkpoint, and ``prompt_interval`` prompts or
    ``time_interval`` have passed since the last claimed slot. Marking claims the slot
    (prompt count and time), so the next one falls due a full interval later however late
    the write happens. While one is pending, further due points merge into it: the write
    takes the session's latest state.
    """
    if session.checkpoint_pending_since is not None or not session.changed_since_checkpoint:
        return False
    since_prompts = session.prompt_count - session.last_checkpoint_prompt
    since_time = now - (session.last_checkpoint_at or session.started_at)
    if since_prompts < config.prompt_interval and since_time < config.time_interval:
        return False
    return pending_mark(session=session, now=now)


def pending_mark(*, session: Session, now: datetime) -> bool:
    """Mark a periodic checkpoint pending now (its interval or a token threshold came);
    True when this call marked it, False when one already is (the write takes the latest
    state). Claims the slot: the prompt and time intervals count afresh from here."""
    if session.checkpoint_pending_since is not None:
        return False
    session.checkpoint_pending_since = now
    session.last_checkpoint_prompt = session.prompt_count
    session.last_checkpoint_at = now
    return True


def pending_flush_if_due(*, session: Session, config: ContinuityConfig, now: datetime) -> None:
    """Write the locked session's pending checkpoint once its debounce has passed."""
    checkpoint = pending_checkpoint_if_due(session=session, config=config, now=now)
    if checkpoint is not None:
        checkpoint_save(checkpoint=checkpoint, config=config)


def pending_checkpoint_if_due(
    *, session: Session, config: ContinuityConfig, now: datetime
) -> Checkpoint | None:
    """The session's pending checkpoint, built but not saved (``checkpoint_build``), once its
    debounce has passed; None while it is not due, or none is pending. The caller saves it
    (``checkpoint_save``) with the session row."""
    if not pending_due(pending_since=session.checkpoint_pending_since, config=config, now=now):
        return None
    return checkpoint_build(session=session, trigger=Trigger.PERIODIC, now=now)


def pending_flush_now(*, session: Session, config: ContinuityConfig, now: datetime) -> None:
    """Write the locked session's pending checkpoint, debounce or not (a boundary event)."""
    if session.checkpoint_pending_since is not None:
        checkpoint_write(session=session, trigger=Trigger.PERIODIC, config=config, now=now)


# The most sessions of a project a new session's start writes the pending work of.
PROJECT_FLUSH_SESSIONS = 5


def pending_flush_project(
    *, session: Session, config: ContinuityConfig, now: datetime
) -> list[Checkpoint]:
    """Write what the other live sessions of ``session``'s project (its owner's, active
    within the recovery window) have not checkpointed yet: a pending periodic checkpoint,
    debounce or not, or the changes since their last one. For a new session's start, before
    it looks for the project's checkpoint to recover: a session that has just died (no
    SessionEnd) has its pending write still to come, and the new session would miss it.

    One query when there is nothing to write. Their rows are locked in the caller's
    transaction, and one another worker holds is passed over: that worker is writing it (a
    live session's own event), and waiting for it could deadlock with a start of its own.
    """
    if not session.project_normalized:
        return []
    others = (
        Session.objects.select_for_update(skip_locked=True)
        .filter(
            Q(checkpoint_pending_since__isnull=False) | Q(changed_since_checkpoint=True),
            owner_id=session.owner_id,
            project_normalized=session.project_normalized,
            ended_at__isnull=True,
            last_activity_at__gte=now - config.recovery_window,
        )
        .exclude(pk=session.pk)
        .order_by("-last_activity_at")[:PROJECT_FLUSH_SESSIONS]
    )
    written = []
    for other in others:
        before = session_values(other)
        written.append(
            checkpoint_write(session=other, trigger=Trigger.PERIODIC, config=config, now=now)
        )
        session_save_changed(session=other, before=before)
    return written


# The end of the batch this process last queued a flush task for (``time.monotonic``).
_batch_lock = threading.Lock()
_batch_ends = float("-inf")


def pending_enqueue(*, session_id: int) -> None:
    """See to it that the session's pending checkpoint (just marked and committed) is written
    off the request; ``session_id`` only names it in the log.

    The first mark of a batch queues a flush task covering the marks this process makes in
    the next ``SIGNET_FLUSH_BATCH_SECONDS``; the others ride on it. The task is named by its
    dotted path, so nothing here imports the task module. Failing to queue (broker down)
    loses nothing: the marks of that batch stay in the database, and their sessions' next
    events or the sweep write them; the first mark after the batch tries again (once per
    batch and process, not at every mark: a broker that drops packets stalls each try). With
    the database as the broker, queueing is an INSERT: on SQLite it waits its turn on the
    writers' lock, not in SQLite's sleeping busy handler.

    A flush that succeeds leaves no result row (``save=False``); one that fails is kept, as
    every task's failure is. A kept success costs the cluster a transaction that loads every
    kept result (up to ``save_limit``) to drop the oldest, and the admin's list of
    successful tasks would hold little else.
    """
    global _batch_ends
    batch = settings.SIGNET_FLUSH_BATCH_SECONDS
    with _batch_lock:
        began = monotonic()
        if began < _batch_ends:
            return  # the task queued for this batch writes it
        _batch_ends = began + batch
    from django_q.conf import Conf
    from django_q.tasks import async_task

    # The marks covered are made before this, by the clock they are stamped with.
    marked_before = timezone.now().timestamp() + batch
    try:
        with write_serialized() if Conf.ORM else nullcontext():
            async_task(
                FLUSH_TASK,
                marked_before,
                task_name="checkpoint-flush",
                save=False,
                broker=_broker(),
            )
    except Exception:
        logger.exception(
            "could not queue the checkpoint flush of a batch (session %s first)", session_id
        )


@cache
def _broker() -> Broker:
    """The task broker, made once per process and shared by its threads (a Redis client
    is). django-q2 makes a new one for each task queued unless it is handed one, and its
    Redis broker then opens a new client, pool and connection, with a handshake and the
    library's version looked up in its installed metadata: a queueing cost 2.0 ms of CPU
    that way, 0.26 ms with the broker kept (measured)."""
    from django_q.brokers import get_broker

    return get_broker()


def checkpoint_flush(*, session_id: int, now: datetime | None = None) -> bool:
    """Write the session's pending periodic checkpoint if its debounce has passed.

    Returns True when a checkpoint was written. Safe to call from any worker at any time:
    the row lock makes sure one pending mark yields one checkpoint.
    """
    config = config_get()
    with write_serialized(), transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        now = now or timezone.now()
        if session is None or not pending_due(
            pending_since=session.checkpoint_pending_since, config=config, now=now
        ):
            return False
        before = session_values(session)
        checkpoint_write(session=session, trigger=Trigger.PERIODIC, config=config, now=now)
        session_save_changed(session=session, before=before)
    return True


class FlushFailed(Exception):
    """Some of the checkpoints due could not be written (each logged); the others were."""


def checkpoints_flush_marked(*, marked_before: float) -> int:
    """A flush task: wait until the marks made before ``marked_before`` (a Unix time) are
    past their debounce, then write every checkpoint due; how many. It waits at most the
    batch it covers and ``MAX_DEBOUNCE_WAIT_SECONDS``, on the clock marks are stamped with."""
    wait = marked_before + config_get().debounce_seconds - timezone.now().timestamp()
    if wait > 0:
        sleep(min(wait, settings.SIGNET_FLUSH_BATCH_SECONDS + MAX_DEBOUNCE_WAIT_SECONDS))
    return checkpoints_flush_due()


def pending_due_sessions(*, cutoff: datetime) -> QuerySet[Session]:
    """The sessions whose pending mark was made at or before ``cutoff``, oldest mark first
    (through the ``session_pending_since`` index)."""
    return Session.objects.filter(checkpoint_pending_since__lte=cutoff).order_by(
        "checkpoint_pending_since"
    )


def checkpoints_flush_due(*, now: datetime | None = None, limit: int = 500) -> int:
    """Write every pending checkpoint past its debounce (at most ``limit``, oldest first);
    how many. The sweep and the flush tasks. A session whose write fails is logged and
    passed over, the others written; then ``FlushFailed`` is raised, so the task is kept as
    failed. ``FLUSH_FAILURES_IN_A_ROW`` failures one after the other stop it at once: the
    database itself is failing, and the rest would fail (and be logged) alike."""
    now = now or timezone.now()
    cutoff = pending_cutoff(config=config_get(), now=now)
    ids = list(pending_due_sessions(cutoff=cutoff).values_list("pk", flat=True)[:limit])
    written = failed = in_a_row = 0
    for pk in ids:
        try:
            written += checkpoint_flush(session_id=pk, now=now)
        except Exception:
            logger.exception("could not write the pending checkpoint of session %s", pk)
            failed += 1
            in_a_row += 1
            if in_a_row >= FLUSH_FAILURES_IN_A_ROW:
                raise FlushFailed(
                    f"{in_a_row} pending checkpoints in a row could not be written; "
                    f"{written} were, {len(ids) - written - failed} not tried"
                ) from None
        else:
            in_a_row = 0
    if failed:
        raise FlushFailed(f"{failed} of {len(ids)} pending checkpoints could not be written")
    return written
