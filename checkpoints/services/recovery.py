"""Recovery: find the checkpoint a (re)starting session should continue from, and render
the ``## Session Recovery Context`` within its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

from django.contrib.auth.models import User

from checkpoints.models import (
    HARNESS_CONTEXT_CAP_CHARS,
    Checkpoint,
    ContinuityConfig,
    Injection,
    Session,
)
from checkpoints.services.redaction import redact

HEADER = "## Session Recovery Context"
MIN_TASK_CHARS = 60
KEY_SHOWN_CHARS = 40  # session keys can be 255 characters; the header must stay short


@dataclass(frozen=True)
class RecoveryMatch:
    checkpoint: Checkpoint
    match: str  # "session", "lineage" or "project"


@dataclass(frozen=True)
class RecoveryContext:
    text: str
    omitted: list[str] = field(default_factory=list)


def recovery_find(
    *,
    owner: User,
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    previous_session_key: str = "",
) -> RecoveryMatch | None:
    """The checkpoint to recover from, in order: this session's own latest (no time window:
    this is what survives ``/compact``), the explicit predecessor's latest, then the latest of
    the same project within the recovery window. None when there is nothing to recover.
    """
    own = Checkpoint.objects.filter(owner_id=owner.pk, session_key=session.session_key).first()
    if own is not None:
        return RecoveryMatch(own, "session")
    previous_key = previous_session_key or (
        session.previous_session.session_key if session.previous_session is not None else ""
    )
    if previous_key:
        previous = Checkpoint.objects.filter(owner_id=owner.pk, session_key=previous_key).first()
        if previous is not None:
            return RecoveryMatch(previous, "lineage")
    if session.project_normalized:
        recent = (
            Checkpoint.objects.filter(
                owner_id=owner.pk,
                project_normalized=session.project_normalized,
                created_at__gte=now - config.recovery_window,
            )
            .exclude(session_key=session.session_key)
            .first()
        )
        if recent is not None:
            return RecoveryMatch(recent, "project")
    return None


def _age(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 90:
        return "just now"
    minutes = seconds // 60
    if minutes < 90:
        return f"{minutes} min ago"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h ago"
    return f"{hours // 24} days ago"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _one_line(text: str, limit: int = 400) -> str:
    return _shorten(" ".join(text.split()), limit)


def _shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` chars, cut at a word boundary with an ellipsis if needed."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut + "…"


def _sections(checkpoint: Checkpoint) -> list[tuple[str, list[str]]]:
    """Sections in priority order, each a list of lines (redacted, one item per line)."""
    task = checkpoint.current_task or (
        checkpoint.recent_prompts[-1] if checkpoint.recent_prompts else ""
    )
    blockers = [f"Blocker: {item}" for item in checkpoint.blockers]
    questions = [f"Open: {item}" for item in checkpoint.open_questions]
    return [
        ("Task", [_one_line(task, 1000)] if task else []),
        ("Next steps", [f"- {_one_line(s)}" for s in checkpoint.next_steps]),
        ("Decisions", [f"- {_one_line(s)}" for s in checkpoint.decisions]),
        ("Open questions and blockers", [f"- {_one_line(s)}" for s in blockers + questions]),
        ("Modified files", [f"- {path}" for path in reversed(checkpoint.modified_files)]),
        (
            "Recent prompts",
            [f"- {_one_line(p, 300)}" for p in reversed(checkpoint.recent_prompts) if p != task],
        ),
    ]


def _footer(checkpoint: Checkpoint, omitted: list[str]) -> str:
    return (
        f"_Omitted for space: {', '.join(omitted)}. Full checkpoint: "
        f"GET /api/checkpoints/{quote(checkpoint.session_key[: KEY_SHOWN_CHARS * 2])}/latest/ "
        "or MCP `session_recall`._"
    )


def recovery_render(
    *,
    checkpoint: Checkpoint,
    match: str,
    config: ContinuityConfig,
    now: datetime,
    current_branch: str = "",
    budget: int | None = None,
) -> RecoveryContext:
    """Render the recovery context for ``checkpoint`` in at most ``budget`` characters.

    The budget is the configured recovery budget, itself reserved inside the inject budget
    and below the harness cap. Sections go in priority order and are cut at line boundaries;
    the last line says what did not fit and where to get it.
    """
    limit = min(
        budget if budget is not None else config.recovery_budget_chars,
        config.recovery_budget_chars,
        config.inject_budget_chars,
        HARNESS_CONTEXT_CAP_CHARS - 1,
    )
    trigger = checkpoint.get_trigger_display().lower()
    where = {"session": "this session", "lineage": "the session this one continues"}.get(
        match, "the latest session in this project"
    )
    head = [
        HEADER,
        f"Recovered from {_article(trigger)} {trigger} checkpoint of {where} "
        f"(`{_shorten(checkpoint.session_key, KEY_SHOWN_CHARS)}`), "
        f"taken {_age(now - checkpoint.created_at)} "
        f"after {checkpoint.prompt_count} prompt{'' if checkpoint.prompt_count == 1 else 's'}.",
    ]
    if current_branch and checkpoint.git_branch and current_branch != checkpoint.git_branch:
        head.append(
            f"Warning: that checkpoint was taken on branch `{checkpoint.git_branch}`; "
            f"you are on `{current_branch}`. Check before relying on it."
        )
    sections = _sections(checkpoint)
    # Room for the omitted line as long as it can get (every section cut), reserved up front.
    footer_room = 2 + len(
        _footer(checkpoint, [f"{title.lower()} (999 more)" for title, _ in sections])
    )
    lines = [redact(line) for line in head]
    used = sum(len(line) + 1 for line in lines)
    omitted: list[str] = []
    for title, body in sections:
        if not body:
            continue
        body = [redact(line) for line in body]
        title_line = f"### {title}"
        room = limit - footer_room - used - len(title_line) - 2
        if title == "Task" and body and len(body[0]) + 1 > room > MIN_TASK_CHARS:
            # The task is the one thing worth shortening rather than dropping.
            body = [_shorten(body[0], room - 1)]
        kept: list[str] = []
        for line in body:
            if len(line) + 1 > room:
                break
            kept.append(line)
            room -= len(line) + 1
        if kept:
            lines += ["", title_line, *kept]
            used += len(title_line) + 2 + sum(len(line) + 1 for line in kept)
        if len(kept) < len(body):
            missing = len(body) - len(kept)
            omitted.append(title.lower() if not kept else f"{title.lower()} ({missing} more)")
    if omitted:
        lines += ["", redact(_footer(checkpoint, omitted))]
    text = "\n".join(lines)
    if len(text) > limit:  # only a budget smaller than the header itself gets here
        text = text[: text.rfind("\n", 0, limit)] if "\n" in text[:limit] else text[:limit]
    return RecoveryContext(text=text, omitted=omitted)


def recovery_prepare(
    *,
    owner: User,
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    previous_session_key: str = "",
    budget: int | None = None,
) -> tuple[RecoveryMatch, RecoveryContext] | None:
    """Find the checkpoint ``session`` would recover from and render its context."""
    match = recovery_find(
        owner=owner,
        session=session,
        config=config,
        now=now,
        previous_session_key=previous_session_key,
    )
    if match is None:
        return None
    context = recovery_render(
        checkpoint=match.checkpoint,
        match=match.match,
        config=config,
        now=now,
        current_branch=session.git_branch,
        budget=budget,
    )
    return match, context


def injection_record(
    *, session: Session, context: RecoveryContext, match: RecoveryMatch, source: str, now: datetime
) -> Injection:
    """Keep the audit of what was injected into ``session``."""
    return Injection.objects.create(
        session=session,
        checkpoint=match.checkpoint,
        source=source[:32],
        match=match.match,
        content=context.text,
        size_chars=len(context.text),
        omitted=context.omitted,
        created_at=now,
    )
