"""Writing checkpoints: content from the session row (and the transcript or the agent),
redacted, linked to the previous checkpoint, and the per-session cap enforced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from checkpoints.models import Checkpoint, ContinuityConfig, Session, Trigger
from checkpoints.services.redaction import redact, redact_data

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
    narrative: str = ""  # the agent's own digest, kept verbatim (redacted)


def _merge_unique(first: Sequence[str], then: Sequence[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in (*first, *then):
        if item:
            seen.pop(item, None)
            seen[item] = None  # re-inserted: most recent last
    return list(seen)[-limit:]


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
    """
    content = content or CheckpointContent()
    if session.get_deferred_fields():  # the hot path loaded only part of the row
        session.refresh_from_db(fields=list(session.get_deferred_fields()))
    parent = (
        Checkpoint.objects.filter(session=session).order_by("-created_at", "-id").only("id").first()
    )
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
        current_task=redact(content.current_task[:MAX_ITEM_CHARS]),
        decisions=redact_data(content.decisions[:MAX_LIST_ITEMS]),
        open_questions=redact_data(content.open_questions[:MAX_LIST_ITEMS]),
        blockers=redact_data(content.blockers[:MAX_LIST_ITEMS]),
        next_steps=redact_data(content.next_steps[:MAX_LIST_ITEMS]),
        modified_files=redact_data(modified),
        recent_prompts=redact_data(prompts),
        memory_queries=redact_data(list(session.recent_queries)),
        recent_remembers=redact_data(list(session.recent_remembers)),
        last_assistant_message=redact(
            (content.last_assistant_message or session.last_assistant_message)[:MAX_ITEM_CHARS]
        ),
        git_branch=content.git_branch or session.git_branch,
        git_head=session.git_head,
        context_tokens=content.context_tokens
        if content.context_tokens is not None
        else session.context_tokens,
        prompt_count=session.prompt_count,
        created_at=now,
    )
    checkpoint.digest = redact(
        content.narrative if trigger == Trigger.AGENT and content.narrative
        else digest_render(session=session, checkpoint=checkpoint, now=now)
    )  # fmt: skip
    checkpoint.save(force_insert=True)
    _enforce_cap(session=session, keep=config.max_checkpoints_per_session)
    session.last_checkpoint_at = now
    session.last_checkpoint_prompt = session.prompt_count
    session.checkpoint_pending_since = None
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
