"""What each kind of event does to its session: the handlers ``engine._apply`` calls.

A handler runs inside the event's transaction with the session row locked (or, for a live
prompt, on a row read without a lock and written back only if unchanged, or on a new row not
yet inserted), changes the row in memory, and says in a ``Step`` what else it decided: the
context to inject and its audit row, a prompt's periodic checkpoint that fell due (both
saved by the caller with the session row), and whether it marked a periodic checkpoint
pending. Every text in the event and its transcript facts is
already redacted and cut to size (``events.event_prepare``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from checkpoints.harnesses.base import AgentTasks, Event, EventKind
from checkpoints.models import Checkpoint, ContinuityConfig, GoalSource, Injection, Session, Trigger
from checkpoints.services.events import (
    GOAL_KEEP_CHARS,
    MAX_FILES,
    MAX_QUERIES,
    MAX_REMEMBERS,
    PROMPT_KEEP_CHARS,
    query_terms,
)
from checkpoints.services.intent import decisions_add, decisions_in, redirect_of
from checkpoints.services.pending import (
    pending_checkpoint_if_due,
    pending_flush_if_due,
    pending_flush_now,
    pending_flush_project,
    pending_mark_if_due,
)
from checkpoints.services.pressure import (
    pressure_acted_expire,
    pressure_reminder,
    pressure_reset,
)
from checkpoints.services.recovery import injection_build, recovery_prepare
from checkpoints.services.store import (
    MAX_LIST_ITEMS,
    MAX_PROMPTS,
    CheckpointContent,
    checkpoint_write,
    session_close,
)
from checkpoints.services.summaries import summary_parse
from hooks.transcripts.prompts import goal_worthy

# One compaction's three events, in whatever order they arrive (see ``_compaction_mark``).
PRE_COMPACT_SEEN = 1
COMPACT_START_SEEN = 2
POST_COMPACT_SEEN = 4
COMPACTION_CYCLE_WINDOW = timedelta(minutes=10)


@dataclass
class Step:
    """What a handler decided beyond the row changes."""

    context: str = ""
    newly_pending: bool = False
    # A prompt's periodic checkpoint that fell due, built but not saved: the caller saves it
    # in the transaction that writes the session row, which it changed.
    checkpoint: Checkpoint | None = None
    # The audit of a recovery context in ``context``: the caller saves it in the transaction
    # that writes the session row (no row, no injection).
    injection: Injection | None = None


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


def _recovery(
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    event: Event,
    source: str,
    previous_key: str = "",
    latest: Checkpoint | None = None,
) -> Step:
    """The recovery context to inject into ``session``, and its audit row; an empty step when
    there is nothing to recover, or nothing the conversation lacks. ``latest``: the session's
    own checkpoint that this event writes, built but not saved yet."""
    prepared = recovery_prepare(
        owner=session.owner,
        session=session,
        config=config,
        now=now,
        previous_session_key=previous_key,
        budget=_recovery_budget(config, event),
        latest=latest,
        conversation_kept=event.conversation_kept,
    )
    if prepared is None:
        return Step()
    match, context = prepared
    injection = injection_build(
        session=session, context=context, match=match, source=source, now=now
    )
    return Step(context=context.text, injection=injection)


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
        # The answer before the compaction is the pre-compaction checkpoint's; kept on, it
        # would stand for the latest in every checkpoint until a Stop brings one.
        session.last_assistant_message = ""
    session.compaction_events |= seen
    session.recovery_due = not session.compaction_recovered


def _on_session_start(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
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
        return Step()
    compact = event.source == "compact"
    if compact:
        _compaction_mark(session, COMPACT_START_SEEN, now)
        if session.compaction_recovered:  # this compaction's recovery was already injected
            session.recovery_due = False
            return Step()
    session.recovery_due = False
    if event.source == "clear":  # the user asked for a clean slate
        return Step()
    if not compact:
        # What another session of the project has not written yet (one that just died) is
        # what this one may recover from.
        pending_flush_project(session=session, config=config, now=now)
    step = _recovery(
        session, config, now, event, event.source or "startup", event.previous_session_key
    )
    if compact and step.context:
        session.compaction_recovered = True
    return step


def _on_prompt(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    # Of the session as it was before this prompt; written by the caller.
    due = pending_checkpoint_if_due(session=session, config=config, now=now)
    text = event.prompt  # redacted before anything is derived from it
    session.prompt_count += 1
    session.changed_since_checkpoint = True
    if text:
        kept = text[:PROMPT_KEEP_CHARS]
        session.recent_prompts = _push(session.recent_prompts, kept, MAX_PROMPTS)
        remembered = event.remember  # the harness's own way to mark a note (its adapter)
        if remembered:
            session.recent_remembers = _push(session.recent_remembers, remembered, MAX_REMEMBERS)
        else:
            prompt_intent_record(session=session, prompt=text)
        terms = query_terms(text)
        if terms:
            # A repeated set of terms moves to the end instead of pushing others out.
            queries = [query for query in session.recent_queries if query != terms]
            session.recent_queries = _push(queries, terms, MAX_QUERIES)
    step = Step(
        newly_pending=pending_mark_if_due(session=session, config=config, now=now),
        checkpoint=due,
    )
    pressure_acted_expire(session=session, config=config)
    if event.queued_at is not None:
        return step
    # Owed when a compaction's SessionStart injected nothing, or no SessionStart came at all.
    if session.recovery_due:
        session.recovery_due = False
        # The checkpoint this prompt writes, if one fell due, is the session's latest.
        recovered = _recovery(session, config, now, event, "prompt", latest=due)
        step.context, step.injection = recovered.context, recovered.injection
        if step.context:
            session.compaction_recovered = True
    # Both fit: the recovery context stays within its reserve of the inject budget.
    separator = "\n\n" if step.context else ""
    room = inject_limit(config=config, event=event) - len(step.context) - len(separator)
    reminder = pressure_reminder(session=session, config=config, room=room)
    if reminder:
        step.context = f"{step.context}{separator}{reminder}"
    return step


def prompt_intent_record(*, session: Session, prompt: str) -> None:
    """What a prompt (not a note) says of the session: its goal, when the session has none
    yet and the prompt can state one (``prompts.goal_worthy``: not a greeting or a go-ahead),
    or when the prompt redirects the session; and the rules and choices it states
    (``services/intent.py``)."""
    if redirect_of(prompt):
        session.goal, session.goal_source = prompt[:GOAL_KEEP_CHARS], GoalSource.REDIRECT
    elif not session.goal and goal_worthy(prompt):
        session.goal, session.goal_source = prompt[:GOAL_KEEP_CHARS], GoalSource.PROMPT
    found = decisions_in(prompt)
    if found:
        session.decisions = decisions_add(list(session.decisions), found)


def summary_record(*, session: Session, summary: str, fresh: bool) -> None:
    """Keep a compaction summary of the session and take its request as the goal.

    ``fresh``: the summary of the compaction that just happened (PostCompact, or its catch-up),
    else an older one the client read from the transcript. A fresh one's current work and
    next steps stand for the session until its next prompt (``summary_prompt``); an older
    one's never do. Its request (*Primary Request and Intent*, the model's own statement of
    what the user asked for, redirects included) is a better goal than the opening request:
    it replaces that, and a fresh one also a redirect the user made before it. An agent's or
    a client's goal stands."""
    if fresh and summary != session.compact_summary:
        session.changed_since_checkpoint = True  # news for the session's next checkpoint
    session.compact_summary = summary
    session.summary_prompt = session.prompt_count if fresh else None
    request = summary_parse(summary).request[:GOAL_KEEP_CHARS]
    weaker = [GoalSource.PROMPT, ""] + ([GoalSource.REDIRECT] if fresh else [])
    if request and (not session.goal or session.goal_source in weaker):
        session.goal, session.goal_source = request, GoalSource.SUMMARY


def tasks_record(*, session: Session, tasks: AgentTasks) -> None:
    """The agent's task list, as its client read it: the task in progress and the pending
    ones become the session's, which the checkpoints that bring none of their own take."""
    pending = [content for content, status in tasks.todos if status == "pending"]
    next_steps = pending[:MAX_LIST_ITEMS]
    if session.current_task != tasks.current_task or session.next_steps != next_steps:
        if session.next_steps != next_steps:
            session.agent_steps_newer = False  # the list's steps are the newer now
        session.current_task = tasks.current_task
        session.next_steps = next_steps
        session.changed_since_checkpoint = True


def _add_files(session: Session, paths: Iterable[str]) -> None:
    files = list(session.modified_files)
    for path in paths:
        if path in files:
            files.remove(path)
        files.append(path)
    session.modified_files = files[-MAX_FILES:]


def _on_tool_use(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.files:
        _add_files(session, event.files)
        session.changed_since_checkpoint = True
    return Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))


def _on_remember(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.remember:
        session.recent_remembers = _push(session.recent_remembers, event.remember, MAX_REMEMBERS)
        session.changed_since_checkpoint = True
    return Step()


def _on_pre_compact(
    session: Session,
    event: Event,
    config: ContinuityConfig,
    now: datetime,
    content: CheckpointContent | None,
) -> Step:
    if content is not None:
        if not session.goal and content.goal:  # the opening request, read by the client
            session.goal, session.goal_source = content.goal, GoalSource.PROMPT
        if content.compact_summary and content.compact_summary != session.compact_summary:
            # An earlier compaction's summary, which the server missed or already has.
            summary_record(session=session, summary=content.compact_summary, fresh=False)
        _add_files(session, content.modified_files)
        if content.git_branch:
            session.git_branch = content.git_branch
        if content.context_tokens is not None:
            session.context_tokens = content.context_tokens
        # The transcript's last answer goes into the checkpoint only: the compaction ends
        # the session's (``_compaction_mark``), and a late PreCompact's is older than any a
        # Stop brought since.
    # The emergency checkpoint takes the latest state, so it also stands for any pending one.
    checkpoint_write(
        session=session, trigger=Trigger.PRE_COMPACTION, config=config, now=now, content=content
    )
    if event.queued_at is None:
        _compaction_mark(session, PRE_COMPACT_SEEN, now)
    return Step()


def _on_post_compact(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    pending_flush_if_due(session=session, config=config, now=now)
    if event.compact_summary:
        summary_record(session=session, summary=event.compact_summary, fresh=True)
    if event.queued_at is None:
        _compaction_mark(session, POST_COMPACT_SEEN, now)
    return Step()


def _on_stop(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    pending_flush_if_due(session=session, config=config, now=now)
    started = session.compaction_started_at
    # A Stop the client's outbox held from before the latest compaction: its answer is stale.
    stale = event.queued_at is not None and started is not None and event.queued_at < started
    if event.last_assistant_message and not stale:
        session.last_assistant_message = event.last_assistant_message
    return Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))


def _on_session_end(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    session_close(
        session=session, config=config, now=now, reason=event.source, final=event.source != "clear"
    )
    return Step()


def _on_sync(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    # A catch-up (``SignetSync``): ``_apply`` applied its backlog and latest; what they
    # changed is written with the session's next checkpoint (a new start's project flush).
    pending_flush_if_due(session=session, config=config, now=now)
    return Step(newly_pending=pending_mark_if_due(session=session, config=config, now=now))


def _on_unknown(
    session: Session, event: Event, config: ContinuityConfig, now: datetime, _: object
) -> Step:
    session.ignored_event_count += 1
    return Step()


Handler = Callable[[Session, Event, ContinuityConfig, datetime, "CheckpointContent | None"], Step]
HANDLERS: dict[EventKind, Handler] = {
    EventKind.SESSION_START: _on_session_start,
    EventKind.PROMPT: _on_prompt,
    EventKind.TOOL_USE: _on_tool_use,
    EventKind.REMEMBER: _on_remember,
    EventKind.PRE_COMPACT: _on_pre_compact,
    EventKind.POST_COMPACT: _on_post_compact,
    EventKind.STOP: _on_stop,
    EventKind.SESSION_END: _on_session_end,
    EventKind.SYNC: _on_sync,
    EventKind.UNKNOWN: _on_unknown,
}
