"""The continuity engine: one normalised ``Event`` in, session state and checkpoints updated,
and an ``Outcome`` (the context to inject, if any) out. It knows no harness.

All state is in the database, and counts and checkpoint decisions are exact with any number
of workers and hosts. An event runs in one transaction holding the session row (``SELECT …
FOR UPDATE`` on PostgreSQL; SQLite's IMMEDIATE transactions serialise writers). The
exception is the commonest event, a live prompt: it reads the row without a lock and writes
it back in one UPDATE that applies only if the row is unchanged, else it tries again
(``_prompt_unlocked``). A session's first prompt is applied to a new row that is then
inserted, a prompt owed a recovery context looks it up before its write, and a prompt whose
periodic checkpoint fell due builds it before its write; so on SQLite, where writers take
turns, a prompt's turn holds no reads and little Python. Both paths run the same
``_apply``, which hands the event to its kind's handler (``handlers.py``: what each event
does).
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from checkpoints.harnesses.base import Event, EventKind, Outcome
from checkpoints.models import ContinuityConfig, HookDelivery, Session
from checkpoints.services.config import config_get
from checkpoints.services.engine.backlog import (
    backlog_apply,
    delivery_digest,
    delivery_record,
    delivery_seen,
    latest_record,
)
from checkpoints.services.engine.handlers import HANDLERS, Step, tasks_record
from checkpoints.services.events import event_prepare, facts_content
from checkpoints.services.locks import write_serialized
from checkpoints.services.pending import pending_due, pending_enqueue, pending_mark
from checkpoints.services.pressure import pressure_usage_record, pressure_window_long
from checkpoints.services.sessions import (
    SESSION_COLUMNS,
    SessionSeed,
    activity_mark,
    session_insert,
    session_lock,
    session_new,
    session_read,
    session_save_changed,
    session_swap,
    session_values,
)
from checkpoints.services.store import CheckpointContent, checkpoint_save

logger = logging.getLogger(__name__)

# The columns a prompt reads or writes on the unlocked path (a recovery's included). The
# locked path loads the whole row: a prompt takes it when it is a replay or carries an
# Idempotency-Key, or lost the unlocked race too often.
PROMPT_FIELDS = (
    "id",
    "owner_id",
    "session_key",
    "started_at",
    "last_activity_at",
    "prompt_count",
    "recent_prompts",
    "recent_queries",
    "recent_remembers",
    # What the session is for and the rules its user stated (``handlers.prompt_intent_record``).
    "goal",
    "goal_source",
    "decisions",
    "last_checkpoint_at",
    "last_checkpoint_prompt",
    "checkpoint_pending_since",
    "recovery_due",
    "compaction_recovered",
    "changed_since_checkpoint",
    "git_branch",
    "project_normalized",
    "previous_session_id",
    "ended_at",
    "end_reason",
    # Context pressure: the usage a prompt may carry, its reminder and token checkpoints.
    "model",
    "context_tokens",
    "context_percent",
    "context_window",
    "pressure_reminders_sent",
    "token_checkpoints_marked",
    "pressure_reminder_level",
    "pressure_reminder_prompt",
    "pressure_agent_acted",
    "pressure_reminder_count",
    # Its prompt id, remembered so that a client's backlog does not count it again.
    "delivered_keys",
    "row_version",
)
# ...and what it reads when its client found the branch or the agent's last text in the
# transcript (``backlog.latest_record``).
PROMPT_LATEST_FIELDS = (
    *PROMPT_FIELDS,
    "git_head",
    "last_assistant_message",
    "compaction_started_at",
)
# Every column: what a prompt reads once its periodic checkpoint is due (the checkpoint
# takes the whole row).
ALL_FIELDS = SESSION_COLUMNS
# Tries of the unlocked prompt path before it queues for the row lock instead.
UNLOCKED_ATTEMPTS = 3


def event_handle(*, owner: User, event: Event, idempotency_key: str = "") -> Outcome:
    """Apply ``event`` for ``owner``; return what to inject (already budgeted and redacted).

    A repeated ``idempotency_key`` (a client's replay) changes nothing and injects nothing.
    An event the client's outbox held (``event.queued_at``) is applied as of when it
    happened: it counts and records its facts, but never injects, never reopens an ended
    session, never moves the last activity back, and leaves the compaction cycle alone.
    What a client found in the transcript (``event.backlog``: what the harness posted
    itself, or should have) is applied first, each part once (``backlog.py``).
    """
    config = config_get()
    if not config.enabled:
        return Outcome()
    # Redaction happens before the lock: writers queue on it.
    event = event_prepare(event)
    content = facts_content(event.transcript)
    now = timezone.now()
    replayed = event.queued_at is not None
    if event.queued_at is not None:
        now = min(now, event.queued_at)
    if event.kind is EventKind.PROMPT and not idempotency_key and not replayed:
        outcome = _prompt_unlocked(owner=owner, event=event, config=config)
        if outcome is not None:
            return outcome
    with write_serialized(), transaction.atomic():
        if idempotency_key and not _delivery_claim(owner=owner, key=idempotency_key, now=now):
            return Outcome(duplicate=True)
        session = session_lock(
            owner=owner,
            session_key=event.session_key,
            seed=_session_seed(event),
            now=now,
        )
        before = session_values(session)
        # Read the clock again once the row is ours: a mark another worker made while we
        # waited for the lock must not look like it lies in our future.
        if not replayed:
            now = max(now, timezone.now())
        step = _apply(session, event, config, now, content)
        session_save_changed(session=session, before=before)
        _step_rows_save(step, config)
        if step.newly_pending:
            transaction.on_commit(partial(pending_enqueue, session_id=session.pk))
    return Outcome(context="" if replayed else step.context)


def _apply(
    session: Session,
    event: Event,
    config: ContinuityConfig,
    now: datetime,
    content: CheckpointContent | None,
) -> Step:
    """Change ``session`` in memory for ``event`` (its handler, and what every event does);
    the caller writes it."""
    replayed = event.queued_at is not None
    if (
        session.end_reason == Session.END_REASON_IDLE
        and event.kind is not EventKind.SESSION_END
        and not replayed
    ):
        # The server ended it for silence, not the harness: the agent is back.
        session.ended_at = None
        session.end_reason = ""
    if event.long_context and not replayed:
        pressure_window_long(session=session, config=config)
    # A late usage is stale: the context has moved on since it was counted.
    usage_marked = (
        event.usage is not None
        and not replayed
        and pressure_usage_record(session=session, usage=event.usage, config=config)
        and pending_mark(session=session, now=now)
    )
    # What the client found in the transcript happened before the event that carries it;
    # the event itself, if the transcript holds it already, is its own handler's.
    backlog = tuple(
        item
        for item in event.backlog
        if not event.delivery_key or item.delivery_key != event.delivery_key
    )
    backlog_marked = bool(backlog) and backlog_apply(
        session=session, events=backlog, config=config, now=now
    )
    # ...and what its lines say of the session now, which a late event's no longer do.
    if event.latest is not None and not replayed:
        latest_record(session=session, latest=event.latest, now=now)
    # Like the usage, a late task list is stale.
    if event.tasks is not None and not replayed:
        tasks_record(session=session, tasks=event.tasks)
    digest = delivery_digest(event=event)
    if digest and replayed and delivery_seen(session=session, digest=digest):
        # Queued, and overtaken by a later event whose backlog applied it (an outbox lets
        # newer events past one that stalled too often, and may drop its oldest).
        step = Step()
    else:
        step = HANDLERS[event.kind](session, event, config, now, content)
        # Remembered, so that a client's backlog does not apply it again.
        if digest:
            delivery_record(session=session, digest=digest, happened_at=now)
    step.newly_pending = step.newly_pending or usage_marked or backlog_marked
    activity_mark(session=session, now=now, replayed=replayed)
    return step


def _prompt_unlocked(*, owner: User, event: Event, config: ContinuityConfig) -> Outcome | None:
    """A live prompt the usual way: read the session row without a lock, apply the prompt in
    memory, and write it back in one UPDATE that only applies if no one wrote the row
    meanwhile (``session_swap``); if someone did, start over.

    A session's first prompt is applied to a new row, which is then inserted
    (``session_insert``); if another worker inserted it first, start over. A recovery the
    prompt owes is looked up before the write, and its audit row written in the same
    transaction. So is a periodic checkpoint past its debounce: the whole row is read, the
    checkpoint built from it (its parent looked up), and written with the row; whoever wrote
    a checkpoint meanwhile changed the row, so ours is not written and we start over.
    Nothing is held while Python works or reads, and a later prompt costs two statements.
    None when the prompt lost the race ``UNLOCKED_ATTEMPTS`` times: the caller then takes
    the locked path.
    """
    fields: tuple[str, ...] = PROMPT_FIELDS if event.latest is None else PROMPT_LATEST_FIELDS
    lost = 0
    while lost < UNLOCKED_ATTEMPTS:
        read = session_read(owner=owner, session_key=event.session_key, fields=fields)
        now = timezone.now()  # after the read: no mark on the row lies in our future
        if read is None:
            session = session_new(
                owner=owner, session_key=event.session_key, seed=_session_seed(event), now=now
            )
        else:
            session = read.session
            if fields is not ALL_FIELDS and pending_due(
                pending_since=session.checkpoint_pending_since, config=config, now=now
            ):
                fields = ALL_FIELDS  # the periodic checkpoint it writes takes the whole row
                continue
        step = _apply(session, event, config, now, None)
        if step.checkpoint is not None and read is not None and fields is not ALL_FIELDS:
            # Due at once, within the prompt (a usage mark with no debounce): built on a
            # part of the row, each missing column would be a query of its own.
            fields = ALL_FIELDS
            continue
        together = (
            partial(_step_rows_save, step, config)
            if step.checkpoint is not None or step.injection is not None
            else None
        )
        if read is None:
            written = session_insert(session=session, together=together)
        else:
            written = session_swap(read=read, together=together)
        if written:
            if step.newly_pending:
                transaction.on_commit(partial(pending_enqueue, session_id=session.pk))
            return Outcome(context=step.context)
        lost += 1
    return None


def _step_rows_save(step: Step, config: ContinuityConfig) -> None:
    """Save the rows a handler built for the session's transaction: a prompt's due periodic
    checkpoint (with the per-session cap) and a recovery context's audit."""
    if step.checkpoint is not None:
        checkpoint_save(checkpoint=step.checkpoint, config=config)
    if step.injection is not None:
        step.injection.save(force_insert=True)


def _delivery_claim(*, owner: User, key: str, now: datetime) -> bool:
    try:
        with transaction.atomic():
            HookDelivery.objects.create(owner=owner, key=key[:100], created_at=now)
    except IntegrityError:
        return False
    return True


def _session_seed(event: Event) -> SessionSeed:
    return SessionSeed(
        harness=event.harness,
        cwd=event.cwd,
        client_project=event.client_project,
        client_git_root=event.client_git_root,
        previous_session_key=event.previous_session_key,
        model=event.model,
        git_branch=event.git_branch,
        git_head=event.git_head,
        transcript_path=event.transcript_path,
        # A first prompt with no SessionStart before it carries the recovery context.
        recovery_due=event.kind is EventKind.PROMPT,
    )
