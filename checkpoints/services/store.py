"""Writing checkpoints: content from the session row (and the transcript or the agent),
redacted, linked to the previous checkpoint, and the per-session cap enforced. Also the other
writes of checkpoints: explicit capture, deletes, and a session's closing checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from django.contrib.auth.models import User
from django.db import connections, router, transaction
from django.db.models import Field
from django.utils import timezone

from checkpoints.models import Checkpoint, ContinuityConfig, GoalSource, Injection, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.locks import write_serialized
from checkpoints.services.pressure import pressure_agent_checkpointed
from checkpoints.services.redaction import redact, redact_clip, redact_data
from checkpoints.services.sessions import SessionSeed, session_lock
from checkpoints.services.statements import (
    Statement,
    statement_build,
    statement_run,
    statement_values,
)
from checkpoints.services.summaries import summary_parse

MAX_LIST_ITEMS = 50
MAX_PROMPTS = 10  # a session's recent prompts, and a checkpoint's
# A prompt cut at least this long (or ending in an ellipsis) is the same as a longer one it
# begins: each record keeps 500 characters of a prompt, a transcript read cuts its own.
CUT_PROMPT_CHARS = 200
MAX_ITEM_CHARS = 2000
PROJECT_KEEP_CHARS = 1024


@dataclass
class CheckpointContent:
    """Structured fields that do not come from the session row (transcript, agent, API)."""

    goal: str = ""
    current_task: str = ""
    decisions: list[str] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    modified_files: list[str] = field(default_factory=list)
    recent_prompts: list[str] = field(default_factory=list)
    last_assistant_message: str = ""
    git_branch: str = ""
    context_tokens: int | None = None
    narrative: str = ""  # a digest written by the agent or a client, kept verbatim (redacted)
    # The harness's latest compaction summary, as the client read it from the transcript.
    compact_summary: str = ""
    agent_id: str = ""
    tags: list[str] = field(default_factory=list)
    state: Any = None  # a runtime's opaque serialised state (the API bounds its size)


def _merge_unique(first: Sequence[str], then: Sequence[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in (*first, *then):
        if item:
            seen.pop(item, None)
            seen[item] = None  # re-inserted: most recent last
    return list(seen)[-limit:]


# The narrative: what the agent (or a client) says about the work. ``_carried`` keeps it
# across the passive checkpoints that follow.
AUTHORED = (Trigger.AGENT, Trigger.EXPLICIT)
CARRIED_FIELDS = ("decisions", "open_questions", "blockers")  # only the narrative has these
CARRIED_WHILE_IDLE = ("current_task", "next_steps")  # the transcript has these too


def _same_prompt(one: str, other: str) -> bool:
    """Whether two records hold the same prompt, one maybe cut shorter than the other."""
    one, other = " ".join(one.split()), " ".join(other.split())
    if one == other:
        return True
    short, long = sorted((one, other), key=len)
    cut = short.endswith("…")
    short = short.removesuffix("…").rstrip()
    return bool(short) and (cut or len(short) >= CUT_PROMPT_CHARS) and long.startswith(short)


def _prompts_merged(kept: Sequence[str], read: Sequence[str]) -> list[str]:
    """The session's own record of its prompts and the ones a transcript read holds, in the
    order they came, each once (the longer of two records of one), the last ``MAX_PROMPTS``.

    Either may lack some: the service misses what its hooks did not get through, the
    transcript's tail what came before it. A prompt only the transcript holds goes after the
    last one both hold before it.
    """
    merged = list(kept)
    at = 0
    for prompt in read:
        found = next(
            (index for index in range(at, len(merged)) if _same_prompt(merged[index], prompt)),
            None,
        )
        if found is None:
            merged.insert(at, prompt)
            at += 1
            continue
        if len(prompt) > len(merged[found]):
            merged[found] = prompt
        at = found + 1
    unique: list[str] = []
    for prompt in reversed(merged):  # a prompt repeated keeps its latest place
        if prompt and not any(_same_prompt(prompt, later) for later in unique):
            unique.append(prompt)
    return unique[:MAX_PROMPTS][::-1]


def _steps_merged(*, session: Session, content: CheckpointContent, authored: bool) -> list[str]:
    """The next steps a checkpoint holds: the agent's standing ones (the session's
    ``agent_next_steps``) and the task list's pending ones, each once, the newer first,
    whatever their source. The task list is the one its client last sent (the session's
    ``next_steps``), or the one the transcript read of this checkpoint found when that differs
    (read just now: the newer)."""
    listed = list(session.next_steps)
    agent_first = session.agent_steps_newer
    if not authored and content.next_steps and content.next_steps != listed:
        listed, agent_first = list(content.next_steps), False
    agent = list(session.agent_next_steps)
    first, then = (agent, listed) if agent_first else (listed, agent)
    return list(dict.fromkeys(step for step in (*first, *then) if step))[:MAX_LIST_ITEMS]


def _summarised(*, session: Session, content: CheckpointContent) -> None:
    """What the session's compaction summary says, where the checkpoint has nothing of its
    own: its request as the goal, and, only while no prompt came since the summary (it is
    then what the work is), its current work as the task and its pending tasks and next step
    as the next steps (``services/summaries.py``). A summary read from the transcript is an
    older compaction's: only its request counts."""
    fresh = session.summary_prompt is not None and session.summary_prompt == session.prompt_count
    needs_goal = not (session.goal or content.goal)
    if not needs_goal and not (fresh and not (content.next_steps and content.current_task)):
        return
    summary = session.compact_summary or content.compact_summary
    if not summary:
        return
    parts = summary_parse(summary)
    if fresh and session.compact_summary:
        if not content.next_steps:
            content.next_steps = parts.next_steps
        if not content.current_task:
            content.current_task = parts.current
    if needs_goal:
        content.goal = parts.request


def _is_last_request(content: CheckpointContent) -> bool:
    """Whether the content's task is only the user's last request: the transcript's stand-in
    when no todo is in progress (its last prompt is that request, cut shorter)."""
    last = content.recent_prompts[-1] if content.recent_prompts else ""
    return bool(last) and content.current_task.startswith(last)


def _carried(
    *, parent: Checkpoint | None, session: Session, trigger: str, content: CheckpointContent
) -> None:
    """Fill the narrative fields ``content`` lacks from the previous checkpoint, where they
    still hold. The rule, field by field:

    - A field the checkpoint brings itself (from the agent, a client or the transcript)
      replaces the previous value.
    - Decisions, open questions and blockers come from agent and explicit checkpoints: an
      empty one takes the previous checkpoint's, so they stand until the next agent or
      explicit checkpoint that names its own. The transcript brings decisions too (the
      user's answers to the agent's questions): they are added to the previous ones, newest
      last, and replace none.
    - The task and the next steps also come from the transcript (the in-progress todo, else
      the last request; the pending todos), or from the agent's task list as its client last
      sent it (the session's ``current_task`` and ``next_steps``). An empty one takes the
      previous checkpoint's when no prompt came since. An empty task also takes it when that
      value is still the one the session's latest agent or explicit checkpoint wrote: the
      agent's own task stands across prompts until an agent, explicit or transcript-derived
      value replaces it. (The agent's next steps stand on the session itself, merged with
      the task list's: ``_steps_merged``.) A value that came from the transcript is stale
      once the user has asked for something new.
    - A transcript task that is only the user's last request does not replace the agent's
      task; the recovery context shows the request anyway.

    At most one query, and only when a value older than the last prompt may carry: the
    session's latest agent or explicit checkpoint (none when that is the parent itself).
    """
    if parent is None:
        return
    read = bool(content.decisions) and trigger not in AUTHORED
    for name in CARRIED_FIELDS:
        if not getattr(content, name):
            setattr(content, name, list(getattr(parent, name)))
    if read:
        content.decisions = _merge_unique(parent.decisions, content.decisions, MAX_LIST_ITEMS)
    idle = parent.prompt_count == session.prompt_count
    if idle and not (content.last_assistant_message or session.last_assistant_message):
        # Still the agent's last word (a compaction clears the session's copy; no turn since).
        content.last_assistant_message = parent.last_assistant_message
    missing = [n for n in CARRIED_WHILE_IDLE if not getattr(content, n) and getattr(parent, n)]
    if idle:
        for name in missing:
            setattr(content, name, copy.copy(getattr(parent, name)))
        missing = []
    missing = [name for name in missing if name == "current_task"]
    weak_task = bool(parent.current_task) and trigger not in AUTHORED and _is_last_request(content)
    if not missing and not weak_task:
        return
    authored = (
        parent
        if parent.trigger in AUTHORED
        else Checkpoint.objects.filter(session=session, trigger__in=AUTHORED)
        .order_by("-created_at", "-id")
        .only("id", *CARRIED_WHILE_IDLE)
        .first()
    )
    if authored is None:
        return
    for name in missing:
        if getattr(parent, name) == getattr(authored, name):
            setattr(content, name, copy.copy(getattr(parent, name)))
    if weak_task and parent.current_task == authored.current_task:
        content.current_task = parent.current_task


def checkpoint_write(
    *,
    session: Session,
    trigger: str,
    config: ContinuityConfig,
    now: datetime,
    content: CheckpointContent | None = None,
) -> Checkpoint:
    """Write a checkpoint of ``session`` now, inside the caller's transaction.

    The caller holds the session row (locked) and saves it afterwards: this updates its
    checkpoint bookkeeping in memory. Whatever was pending is consumed by this checkpoint.
    The oldest checkpoints beyond ``max_checkpoints_per_session`` go in the same transaction.
    Every text is redacted here, whatever the caller did.
    """
    checkpoint = checkpoint_build(session=session, trigger=trigger, now=now, content=content)
    checkpoint_save(checkpoint=checkpoint, config=config)
    return checkpoint


def checkpoint_save(*, checkpoint: Checkpoint, config: ContinuityConfig) -> None:
    """Insert a checkpoint made by ``checkpoint_build`` and drop its session's oldest beyond
    ``max_checkpoints_per_session``, in the caller's transaction (the one that writes the
    session row ``checkpoint_build`` changed)."""
    checkpoint.save(force_insert=True)
    _enforce_cap(session=checkpoint.session, keep=config.max_checkpoints_per_session)


def checkpoint_build(
    *,
    session: Session,
    trigger: str,
    now: datetime,
    content: CheckpointContent | None = None,
) -> Checkpoint:
    """The checkpoint of ``session`` now, not saved: ``checkpoint_write`` without the writes.

    It reads the session's latest checkpoint (its parent), and changes the session's
    checkpoint bookkeeping in memory as ``checkpoint_write`` does. For a caller that reads
    without a lock and writes the row and the checkpoint in one short transaction
    (``engine._prompt_unlocked``): a checkpoint written meanwhile by anyone else changed the
    session row, so that write does not apply and the caller starts over.
    """
    content = dataclasses.replace(content) if content else CheckpointContent()
    authored = trigger in AUTHORED
    if authored and content.goal:
        # The agent (or an API client) says what the session is for.
        session.goal = redact_clip(content.goal, MAX_ITEM_CHARS)
        session.goal_source = GoalSource.AGENT
    if authored and content.next_steps:
        # Its own next steps: they stand until another agent or explicit checkpoint names its own.
        session.agent_next_steps = redact_data(content.next_steps[:MAX_LIST_ITEMS])
        session.agent_steps_newer = True
    # The agent's own task list (its client's last reading) when the checkpoint brings none.
    if not content.current_task:
        content.current_task = session.current_task
    content.next_steps = _steps_merged(session=session, content=content, authored=authored)
    parent = None if session.created_now else _latest(session)  # a new session has none
    _carried(parent=parent, session=session, trigger=trigger, content=content)
    _summarised(session=session, content=content)
    modified = _merge_unique(session.modified_files, content.modified_files, MAX_LIST_ITEMS)
    prompts = _prompts_merged(session.recent_prompts, content.recent_prompts)
    checkpoint = Checkpoint(
        owner_id=session.owner_id,
        session=session,
        session_key=session.session_key,
        project_normalized=session.project_normalized,
        harness=session.harness,
        trigger=trigger,
        parent=parent,
        goal=redact_clip(session.goal or content.goal, MAX_ITEM_CHARS),
        current_task=redact_clip(content.current_task, MAX_ITEM_CHARS),
        # The agent's (or the API's) decisions, then the ones the user stated in prompts.
        decisions=redact_data(_merge_unique(content.decisions, session.decisions, MAX_LIST_ITEMS)),
        open_questions=redact_data(content.open_questions[:MAX_LIST_ITEMS]),
        blockers=redact_data(content.blockers[:MAX_LIST_ITEMS]),
        next_steps=redact_data(content.next_steps[:MAX_LIST_ITEMS]),
        modified_files=redact_data(modified),
        recent_prompts=redact_data(prompts),
        # A prompt repeated word for word gives the same terms (and notes repeat): one each.
        memory_queries=redact_data(_merge_unique((), session.recent_queries, MAX_LIST_ITEMS)),
        recent_remembers=redact_data(_merge_unique((), session.recent_remembers, MAX_LIST_ITEMS)),
        last_assistant_message=redact_clip(
            content.last_assistant_message or session.last_assistant_message, MAX_ITEM_CHARS
        ),
        git_branch=content.git_branch or session.git_branch,
        git_head=session.git_head,
        context_tokens=content.context_tokens
        if content.context_tokens is not None
        else session.context_tokens,
        prompt_count=session.prompt_count,
        new_prompts=max(0, session.prompt_count - (parent.prompt_count if parent else 0)),
        agent_id=content.agent_id[:255],
        tags=redact_data(content.tags),
        state=redact_data(content.state),
        created_at=now,
    )
    checkpoint.digest = redact(
        content.narrative or digest_render(session=session, checkpoint=checkpoint, now=now)
    )
    session.created_now = False  # it has a checkpoint now (once saved)
    if trigger != Trigger.PERIODIC:
        # A periodic checkpoint's slot was claimed when it was marked; any other checkpoint
        # starts the periodic count afresh.
        session.last_checkpoint_at = now
        session.last_checkpoint_prompt = session.prompt_count
    session.checkpoint_pending_since = None
    session.changed_since_checkpoint = False
    return checkpoint


def checkpoint_capture(
    *,
    owner: User,
    session_key: str,
    project: str,
    harness: str,
    trigger: str,
    content: CheckpointContent,
) -> Checkpoint:
    """Write an explicit or agent checkpoint (the API, the MCP tool), creating the session
    if needed. Same locking as hook events, so it never races the session's own stream."""
    config = config_get()
    now = timezone.now()
    with write_serialized(), transaction.atomic():
        session = session_lock(
            owner=owner,
            session_key=session_key,
            seed=SessionSeed(harness=harness, cwd=redact_clip(project, PROJECT_KEEP_CHARS)),
            now=now,
        )
        now = max(now, timezone.now())
        checkpoint = checkpoint_write(
            session=session, trigger=trigger, config=config, now=now, content=content
        )
        if trigger == Trigger.AGENT:
            pressure_agent_checkpointed(session=session, config=config)
        session.last_activity_at = now
        session.save()
    return checkpoint


def checkpoints_delete(*, owner: User, session_key: str, checkpoint_id: str | None = None) -> int:
    """Delete one checkpoint of a session, or all of them; the number deleted."""
    rows = Checkpoint.objects.filter(owner=owner, session_key=session_key)
    if checkpoint_id is not None:
        rows = rows.filter(id=checkpoint_id)
    deleted, _ = rows.delete()
    return deleted


def session_delete(*, session: Session) -> None:
    """Delete a session with its checkpoints and injections; sessions continuing it keep
    going, without the link back."""
    with transaction.atomic():
        session.delete()


# Every reference to a checkpoint, and what its deletion does to it. ``checkpoints_delete_ids``
# applies these by hand (Django's collector would load each row first); a test holds this
# list against the models, so a new reference cannot be missed.
CHECKPOINT_REFERENCES = (
    ("checkpoints.Checkpoint", "parent"),
    ("checkpoints.Injection", "checkpoint"),
)


def checkpoints_delete_ids(*, ids: Sequence[uuid.UUID]) -> int:
    """Delete these checkpoints in the caller's transaction, in three statements whatever
    their number: children and injections lose the reference (both ``SET_NULL``), then the
    rows go. Returns the number deleted. For the prune and the per-session cap."""
    if not ids:
        return 0
    Checkpoint.objects.filter(parent_id__in=ids).update(parent=None)
    Injection.objects.filter(checkpoint_id__in=ids).update(checkpoint=None)
    # The collector's own last step, without its row-by-row loading.
    deleted: int | None = Checkpoint.objects.filter(id__in=ids)._raw_delete(Checkpoint.objects.db)
    return deleted or 0


def session_close(
    *, session: Session, config: ContinuityConfig, now: datetime, reason: str, final: bool
) -> Checkpoint | None:
    """End the locked ``session``: its last checkpoint first, then the end mark.

    With ``final``, anything that changed since the last checkpoint gets a session-end
    checkpoint; otherwise (a ``/clear``) only a pending periodic one is written. Returns the
    checkpoint written, if any. The caller saves the row.
    """
    checkpoint = None
    if final and session.changed_since_checkpoint:
        checkpoint = checkpoint_write(
            session=session, trigger=Trigger.SESSION_END, config=config, now=now
        )
    elif session.checkpoint_pending_since is not None:
        checkpoint = checkpoint_write(
            session=session, trigger=Trigger.PERIODIC, config=config, now=now
        )
    session.ended_at = max(now, session.started_at)
    session.end_reason = reason[:64]
    return checkpoint


def _enforce_cap(*, session: Session, keep: int) -> None:
    # Once a session is at its cap, each checkpoint it writes drops one: in three statements
    # (``checkpoints_delete_ids``) rather than through Django's collector, which loads the
    # rows and their references first (measured on PostgreSQL, the look-up and the delete of
    # one: 3.0 -> 2.0 ms of the worker's CPU).
    alias = router.db_for_write(Checkpoint) or "default"
    stale = statement_run(statement=_beyond_statement(alias), params=[session.pk, keep]).rows
    if stale:
        connection, fields = connections[alias], (Checkpoint._meta.get_field("id"),)
        ids = [
            statement_values(connection=connection, fields=fields, row=row)["id"] for row in stale
        ]
        checkpoints_delete_ids(ids=ids)


# A checkpoint's look-ups of its session's others, newest first, as pre-built statements
# (``services/statements.py``): once per checkpoint written, the ORM's compilation of each
# cost about as much as the rest of the write's Python.
_PARENT_FIELDS = (
    "id",
    "trigger",
    "prompt_count",
    "last_assistant_message",
    *CARRIED_FIELDS,
    *CARRIED_WHILE_IDLE,
)


@cache
def _parent_fields() -> tuple[Field[Any, Any], ...]:
    return tuple(
        field for field in Checkpoint._meta.concrete_fields if field.attname in _PARENT_FIELDS
    )


def _newest_first(alias: str, *, columns: str, tail: str) -> Statement:
    """``SELECT columns`` of one session's checkpoints, newest first, then ``tail``."""
    quote = connections[alias].ops.quote_name
    return statement_build(
        alias=alias,
        sql=(
            f"SELECT {columns} FROM {quote(Checkpoint._meta.db_table)} "  # noqa: S608
            f"WHERE {quote('session_id')} = %s "
            f"ORDER BY {quote('created_at')} DESC, {quote('id')} DESC {tail}"
        ),
        returns_rows=True,
    )


@cache
def _latest_statement(alias: str) -> Statement:
    quote = connections[alias].ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in _parent_fields())
    return _newest_first(alias, columns=columns, tail="LIMIT 1")


@cache
def _beyond_statement(alias: str) -> Statement:
    """The ids of a session's checkpoints past the newest N (at most 1000 at a time)."""
    quote = connections[alias].ops.quote_name
    return _newest_first(alias, columns=quote("id"), tail="LIMIT 1000 OFFSET %s")


def _latest(session: Session) -> Checkpoint | None:
    """The session's latest checkpoint, with only what a new one takes from it loaded."""
    alias = router.db_for_read(Checkpoint) or "default"
    rows = statement_run(statement=_latest_statement(alias), params=[session.pk]).rows
    if not rows:
        return None
    fields = _parent_fields()
    values = statement_values(connection=connections[alias], fields=fields, row=rows[0])
    return Checkpoint.from_db(alias, list(values), list(values.values()))


def _minutes(start: datetime, end: datetime) -> str:
    minutes = max(0, int((end - start).total_seconds() // 60))
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def _bullets(items: Sequence[str], limit: int = 10) -> str:
    return "\n".join(f"- {item}" for item in list(items)[-limit:])


def digest_render(*, session: Session, checkpoint: Checkpoint, now: datetime) -> str:
    """The passive digest: what the service itself saw of the session, as Markdown."""
    branch = f" (branch `{checkpoint.git_branch}`)" if checkpoint.git_branch else ""
    lines = [
        "## Session Checkpoint",
        f"**Project:** {session.project_normalized or session.project or 'unknown'}{branch}",
        f"**Session:** `{session.session_key}` · {session.harness} · {checkpoint.trigger}",
        f"**Prompts:** {session.prompt_count} · **Duration:** {_minutes(session.started_at, now)}",
        f"**Memory activity:** {len(checkpoint.memory_queries)} recent queries, "
        f"{len(checkpoint.recent_remembers)} remembered",
    ]
    if checkpoint.context_tokens:
        lines.append(f"**Context used:** {checkpoint.context_tokens:,} tokens")
    sections = [
        ("Goal", checkpoint.goal),
        ("Current task", checkpoint.current_task),
        ("Next steps", _bullets(checkpoint.next_steps)),
        ("Decisions", _bullets(checkpoint.decisions)),
        ("Blockers", _bullets(checkpoint.blockers)),
        ("Modified files", _bullets(checkpoint.modified_files, 20)),
        ("Recent prompts", _bullets(checkpoint.recent_prompts, 5)),
        ("Remembered", _bullets(checkpoint.recent_remembers)),
        ("Last assistant message", checkpoint.last_assistant_message),
    ]
    for title, body in sections:
        if body:
            lines += ["", f"### {title}", body]
    return "\n".join(lines)
