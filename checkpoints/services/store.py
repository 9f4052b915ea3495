"""Writing checkpoints: content from the session row (and the transcript or the agent),
redacted, linked to the previous checkpoint, and the per-session cap enforced. Also the other
writes of checkpoints: explicit capture, deletes, and a session's closing checkpoint.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from checkpoints.models import Checkpoint, ContinuityConfig, Injection, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.locks import write_serialized
from checkpoints.services.redaction import redact, redact_clip, redact_data
from checkpoints.services.sessions import SessionSeed, session_lock

MAX_LIST_ITEMS = 50
MAX_ITEM_CHARS = 2000


@dataclass
class CheckpointContent:
    """Structured fields that do not come from the session row (transcript, agent, API)."""

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


CARRIED_FIELDS = ("decisions", "open_questions", "blockers")  # stand until replaced
CARRIED_WHILE_IDLE = ("current_task", "next_steps")  # stand while no new prompt came


def _carried(parent: Checkpoint | None, session: Session, content: CheckpointContent) -> None:
    """Fill what ``content`` lacks from the previous checkpoint, where it still holds.

    A session-end checkpoint right after a pre-compaction one must not lose the task the
    transcript gave; a task is stale, though, once the user has asked for something new.
    """
    if parent is None:
        return
    for name in CARRIED_FIELDS:
        if not getattr(content, name):
            setattr(content, name, list(getattr(parent, name)))
    if parent.prompt_count == session.prompt_count:
        if not content.current_task:
            content.current_task = parent.current_task
        if not content.next_steps:
            content.next_steps = list(parent.next_steps)


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
    content = dataclasses.replace(content) if content else CheckpointContent()
    if session.get_deferred_fields():  # the hot path loaded only part of the row
        session.refresh_from_db(fields=list(session.get_deferred_fields()))
    parent = (
        Checkpoint.objects.filter(session=session)
        .order_by("-created_at", "-id")
        .only("id", "prompt_count", *CARRIED_FIELDS, *CARRIED_WHILE_IDLE)
        .first()
    )
    _carried(parent, session, content)
    modified = _merge_unique(session.modified_files, content.modified_files, MAX_LIST_ITEMS)
    prompts = content.recent_prompts or list(session.recent_prompts)
    checkpoint = Checkpoint(
        owner_id=session.owner_id,
        session=session,
        session_key=session.session_key,
        project_normalized=session.project_normalized,
        harness=session.harness,
        trigger=trigger,
        parent=parent,
        current_task=redact_clip(content.current_task, MAX_ITEM_CHARS),
        decisions=redact_data(content.decisions[:MAX_LIST_ITEMS]),
        open_questions=redact_data(content.open_questions[:MAX_LIST_ITEMS]),
        blockers=redact_data(content.blockers[:MAX_LIST_ITEMS]),
        next_steps=redact_data(content.next_steps[:MAX_LIST_ITEMS]),
        modified_files=redact_data(modified),
        recent_prompts=redact_data(prompts),
        memory_queries=redact_data(list(session.recent_queries)),
        recent_remembers=redact_data(list(session.recent_remembers)),
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
    checkpoint.save(force_insert=True)
    _enforce_cap(session=session, keep=config.max_checkpoints_per_session)
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
            seed=SessionSeed(harness=harness, cwd=project),
            now=now,
        )
        now = max(now, timezone.now())
        checkpoint = checkpoint_write(
            session=session, trigger=trigger, config=config, now=now, content=content
        )
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
    rows go. Returns the number deleted. For bulk deletes (the prune)."""
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
    stale = list(
        Checkpoint.objects.filter(session=session)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)[keep : keep + 1000]
    )
    if stale:
        Checkpoint.objects.filter(id__in=stale).delete()


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
        f"**Memory activity:** {len(session.recent_queries)} recent queries, "
        f"{len(session.recent_remembers)} remembered",
    ]
    if checkpoint.context_tokens:
        lines.append(f"**Context used:** {checkpoint.context_tokens:,} tokens")
    sections = [
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
