"""The continuity engine: one normalised ``Event`` in, session state and checkpoints updated,
and an ``Outcome`` (the context to inject, if any) out. It knows no harness.

All state is in the database, and counts and checkpoint decisions are exact with any number
of workers and hosts. An event runs in one transaction holding the session row (``SELECT …
FOR UPDATE`` on PostgreSQL; SQLite's IMMEDIATE transactions serialise writers). The
exception is the commonest event, a live prompt that needs nothing but its own row: it reads
the row without a lock and writes it back in one UPDATE that applies only if the row is
unchanged, else it tries again (``_prompt_unlocked``). Both paths run the same ``_apply``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from checkpoints.harnesses.base import Event, EventKind, Outcome
from checkpoints.models import ContinuityConfig, HookDelivery, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.events import (
    MAX_FILES,
    MAX_PROMPTS,
    MAX_QUERIES,
    MAX_REMEMBERS,
    PROMPT_KEEP_CHARS,
    event_prepare,
    facts_content,
    query_terms,
)
from checkpoints.services.locks import write_serialized
from checkpoints.services.pending import (
    pending_due,
    pending_enqueue,
    pending_flush_if_due,
    pending_flush_now,
    pending_mark,
    pending_mark_if_due,
)
from checkpoints.services.pressure import (
    pressure_acted_expire,
    pressure_reminder,
    pressure_reset,
    pressure_usage_record,
)
from checkpoints.services.recovery import injection_record, recovery_prepare
from checkpoints.services.sessions import (
    SessionSeed,
    session_lock,
    session_read,
    session_save_changed,
    session_swap,
    session_values,
)
from checkpoints.services.store import CheckpointContent, checkpoint_write, session_close

logger = logging.getLogger(__name__)

# The columns a prompt reads or writes on the unlocked path. The locked path loads the whole
# row: a prompt takes it when it needs more (a new session, a recovery, a due checkpoint).
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
    "last_checkpoint_at",
    "last_checkpoint_prompt",
    "checkpoint_pending_since",
    "recovery_due",
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
    "row_version",
)
# Tries of the unlocked prompt path before it queues for the row lock instead.
UNLOCKED_ATTEMPTS = 3
# One compaction's three events, in whatever order they arrive (see ``_compaction_mark``).
PRE_COMPACT_SEEN = 1
COMPACT_START_SEEN = 2
POST_COMPACT_SEEN = 4
COMPACTION_CYCLE_WINDOW = timedelta(minutes=10)


@dataclass
class _Step:
    """What a handler decided beyond the row changes."""

    context: str = ""
    newly_pending: bool = False


def event_handle(*, owner: User, event: Event, idempotency_key: str = "") -> Outcome:
    """Apply ``event`` for ``owner``; return what to inject (already budgeted and redacted).

    A repeated ``idempotency_key`` (a client's replay) changes nothing and injects nothing.
    An event the client's outbox held (``event.queued_at``) is applied as of when it
    happened: it counts and records its facts, but never injects, never reopens an ended
    session, never moves the last activity back, and leaves the compaction cycle alone.
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
        if step.newly_pending:
            transaction.on_commit(partial(pending_enqueue, session_id=session.pk))
    return Outcome(context="" if replayed else step.context)


def _apply(
    session: Session,
    event: Event,
    config: ContinuityConfig,
    now: datetime,
    content: CheckpointContent | None,
) -> _Step:
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
    # A late usage is stale: the context has moved on since it was counted.
    usage_marked = (
        event.usage is not None
        and not replayed
        and pressure_usage_record(session=session, usage=event.usage, config=config)
        and pending_mark(session=session, now=now)
    )
    step = HANDLERS[event.kind](session, event, config, now, content)
    step.newly_pending = step.newly_pending or usage_marked
    session.last_activity_at = max(now, session.last_activity_at) if replayed else now
    return step


def _prompt_unlocked(*, owner: User, event: Event, config: ContinuityConfig) -> Outcome | None:
    """A live prompt the usual way: read the session row without a lock, apply the prompt in
    memory, and write it back in one UPDATE that only applies if no one wrote the row
    meanwhile (``session_swap``); if someone did, start over.

    Nothing is held while Python works, and a prompt costs two statements. None when this
    prompt needs more than its own row (the session is new, a pending checkpoint is past its
    debounce, or recovery is owed) or lost the race ``UNLOCKED_ATTEMPTS`` times: the caller
    then takes the locked path.
    """
    for _ in range(UNLOCKED_ATTEMPTS):
        read = session_read(owner=owner, session_key=event.session_key, fields=PROMPT_FIELDS)
        if read is None or read.session.recovery_due:
            return None
        session = read.session
        now = timezone.now()  # after the read: no mark on the row lies in our future
        if pending_due(pending_since=session.checkpoint_pending_since, config=config, now=now):
            return None
        step = _apply(session, event, config, now, None)
        if session_swap(read=read):
            if step.newly_pending:
                transaction.on_commit(partial(pending_enqueue, session_id=session.pk))
            return Outcome(context=step.context)
    return None


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


def _push(items: list[str], item: str, limit: int) -> list[str]:
    return [*items, item][-limit:]


def inject_limit(*, config: ContinuityConfig, event: Event) -> int:
    """The most an injection into ``event``'s harness may hold: the configured inject budget,
    below the harness's own cap when it has one."""
    limit = config.inject_budget_chars
    if event.context_cap_chars:
        limit = min(limit, event.context_cap_chars - 1)
    return limit


def _recovery_budget(config: ContinuityConfig, event: Event) -> int:
    """The recovery context's share of the inject limit: the configured share of the
    configured budget, scaled down for a harness whose cap is smaller."""
    limit = inject_limit(config=config, event=event)
    if limit >= config.inject_budget_chars:
        return config.recovery_budget_chars
    return max(1, limit * config.recovery_budget_chars // config.inject_budget_chars)


def _recovery_context(
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    event: Event,
    source: str,
    previous_key: str = "",
) -> str:
    prepared = recovery_prepare(
        owner=session.owner,
        session=session,
        config=config,
        now=now,
        previous_session_key=previous_key,
        budget=_recovery_budget(config, event),
    )
    if prepared is None:
        return ""
    match, context = prepared
    injection_record(session=session, context=context, match=match, source=source, now=now)
    return context.text


def _compaction_mark(session: Session, seen: int, now: datetime) -> None:
    """Count one of a compaction's events (``PRE_COMPACT_SEEN`` …) into its cycle.

    Claude Code sends PreCompact, then SessionStart(compact) and PostCompact in an order we
    do not control, and any may be lost. An event joins the open cycle unless the cycle has
    already seen one like it or began more than ``COMPACTION_CYCLE_WINDOW`` ago; otherwise
    it opens the next cycle (one more compaction). While the cycle's recovery has not been
    injected, the next event that can inject owes it (``recovery_due``): so exactly one
    injection per cycle, at SessionStart(compact) or else at the first prompt. A new cycle
    also clears the context pressure of the last one (``pressure_reset``).
    """
    started = session.compaction_started_at
    same_cycle = (
        started is not None
        and not session.compaction_events & seen
        and timedelta(0) <= now - started <= COMPACTION_CYCLE_WINDOW
    )
    if not same_cycle:
        session.compaction_started_at = now
        session.compaction_events = 0
        session.compaction_recovered = False
        session.compaction_count += 1
        pressure_reset(session=session)
    session.compaction_events |= seen
    session.recovery_due = not session.compaction_recovered


# Handlers run inside the event's transaction with the session row locked. Every text in
# ``event`` and ``content`` is already redacted and cut to size (``_event_prepare``).


def _on_session_start(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_now(session=session, config=config, now=now)
    replayed = event.queued_at is not None
    if not replayed:  # a late SessionStart must not undo the SessionEnd that followed it
        session.ended_at = None
        session.end_reason = ""
    if event.model:
        session.model = event.model[:128]
    if event.transcript_path:
        session.transcript_path = event.transcript_path[:4096]
    if event.git_branch:
        session.git_branch = event.git_branch[:255]
        session.git_head = event.git_head[:64]
    if replayed:  # the agent never saw that SessionStart's answer: nothing to inject now
        return _Step()
    compact = event.source == "compact"
    if compact:
        _compaction_mark(session, COMPACT_START_SEEN, now)
        if session.compaction_recovered:  # this compaction's recovery was already injected
            session.recovery_due = False
            return _Step()
    session.recovery_due = False
    if event.source == "clear":  # the user asked for a clean slate
        return _Step()
    context = _recovery_context(
        session, config, now, event, event.source or "startup", event.previous_session_key
    )
    if compact and context:
        session.compaction_recovered = True
    return _Step(context=context)


def _on_prompt(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_if_due(session=session, config=config, now=now)
    text = event.prompt  # redacted before anything is derived from it
    session.prompt_count += 1
    session.changed_since_checkpoint = True
    if text:
        kept = text[:PROMPT_KEEP_CHARS]
        session.recent_prompts = _push(session.recent_prompts, kept, MAX_PROMPTS)
        remembered = event.remember  # the harness's own way to mark a note (its adapter)
        if remembered:
            session.recent_remembers = _push(session.recent_remembers, remembered, MAX_REMEMBERS)
        terms = query_terms(text)
        if terms:
            # A repeated set of terms moves to the end instead of pushing others out.
            queries = [query for query in session.recent_queries if query != terms]
            session.recent_queries = _push(queries, terms, MAX_QUERIES)
    step = _Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))
    pressure_acted_expire(session=session, config=config)
    if event.queued_at is not None:
        return step
    # Owed when a compaction's SessionStart injected nothing, or no SessionStart came at all.
    if session.recovery_due:
        session.recovery_due = False
        step.context = _recovery_context(session, config, now, event, "prompt")
        if step.context:
            session.compaction_recovered = True
    # Both fit: the recovery context stays within its reserve of the inject budget.
    separator = "\n\n" if step.context else ""
    room = inject_limit(config=config, event=event) - len(step.context) - len(separator)
    reminder = pressure_reminder(session=session, config=config, room=room)
    if reminder:
        step.context = f"{step.context}{separator}{reminder}"
    return step


def _add_files(session: Session, paths: Iterable[str]) -> None:
    files = list(session.modified_files)
    for path in paths:
        if path in files:
            files.remove(path)
        files.append(path)
    session.modified_files = files[-MAX_FILES:]


def _on_tool_use(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.files:
        _add_files(session, event.files)
        session.changed_since_checkpoint = True
    return _Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))


def _on_remember(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.remember:
        session.recent_remembers = _push(session.recent_remembers, event.remember, MAX_REMEMBERS)
        session.changed_since_checkpoint = True
    return _Step()


def _on_pre_compact(
    session: Session,
    event: Event,
    config: ContinuityConfig,
    now: datetime,
    content: CheckpointContent | None,
) -> _Step:
    if content is not None:
        _add_files(session, content.modified_files)
        if content.git_branch:
            session.git_branch = content.git_branch
        if content.context_tokens is not None:
            session.context_tokens = content.context_tokens
        if content.last_assistant_message:
            session.last_assistant_message = content.last_assistant_message
    # The emergency checkpoint takes the latest state, so it also stands for any pending one.
    checkpoint_write(
        session=session, trigger=Trigger.PRE_COMPACTION, config=config, now=now, content=content
    )
    if event.queued_at is None:
        _compaction_mark(session, PRE_COMPACT_SEEN, now)
    return _Step()


def _on_post_compact(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.compact_summary:
        session.compact_summary = event.compact_summary
    if event.queued_at is None:
        _compaction_mark(session, POST_COMPACT_SEEN, now)
    return _Step()


def _on_stop(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.last_assistant_message:
        session.last_assistant_message = event.last_assistant_message
    return _Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))


def _on_session_end(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    session_close(
        session=session, config=config, now=now, reason=event.source, final=event.source != "clear"
    )
    return _Step()


def _on_unknown(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> _Step:
    session.ignored_event_count += 1
    return _Step()


Handler = Callable[[Session, Event, ContinuityConfig, datetime, "CheckpointContent | None"], _Step]
HANDLERS: dict[EventKind, Handler] = {
    EventKind.SESSION_START: _on_session_start,
    EventKind.PROMPT: _on_prompt,
    EventKind.TOOL_USE: _on_tool_use,
    EventKind.REMEMBER: _on_remember,
    EventKind.PRE_COMPACT: _on_pre_compact,
    EventKind.POST_COMPACT: _on_post_compact,
    EventKind.STOP: _on_stop,
    EventKind.SESSION_END: _on_session_end,
    EventKind.UNKNOWN: _on_unknown,
}
