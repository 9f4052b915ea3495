"""What the MCP tools do, in plain synchronous Django: find the session a call is about,
validate with the API's own serializer, write through ``checkpoint_capture`` (the one write
path of explicit and agent checkpoints), read through the selectors and ``recovery_prepare``.

The caller is an ``McpPrincipal``: the token's owner and scopes, and what the transport
knows of the session (a key from the environment or a header, the stdio server's working
directory). Every read and write is owner-scoped: another owner's session answers exactly
like one that does not exist. A refusal raises ``ToolError``, which the SDK turns into a
tool result with ``isError`` and the message as its text.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone
from mcp.server.mcpserver.exceptions import ToolError
from rest_framework.utils.encoders import JSONEncoder

from checkpoints.api.serializers import CheckpointCaptureSerializer, CheckpointDetailSerializer
from checkpoints.harnesses.base import identifier_problem
from checkpoints.mcp.principal import McpPrincipal
from checkpoints.models import Checkpoint, Harness, Scope, Session, Trigger
from checkpoints.selectors import CheckpointFilters, checkpoint_list, session_get
from checkpoints.services.config import config_get
from checkpoints.services.projects import lexical_normalize, path_ancestors, project_identify
from checkpoints.services.recovery import recovery_prepare, recovery_render
from checkpoints.services.redaction import redact

SUMMARY_LINE_CHARS = 160
DEFAULT_LIST_LIMIT = 10
NO_SESSION = (
    "No current session is known to this MCP server. Pass `session_key` (your session's id)"
)


def _require_scope(principal: McpPrincipal, scope: str) -> None:
    if scope not in principal.scopes:
        raise ToolError(f"This server's token lacks the '{scope}' scope this tool needs.")


def _live_session_in(*, owner: User, cwd: str) -> Session | None:
    """The owner's most recently active live session whose project holds ``cwd`` (of any
    project when ``cwd`` is '')."""
    live = Session.objects.filter(owner=owner, ended_at__isnull=True)
    if cwd:
        path = lexical_normalize(cwd)
        if not path or not posixpath.isabs(path):
            return None
        ancestors = path_ancestors(path)
        live = live.filter(Q(project_normalized__in=ancestors) | Q(project__in=ancestors))
    return live.order_by("-last_activity_at", "-id").first()


def session_key_resolve(*, principal: McpPrincipal, session_key: str = "") -> str:
    """The key of the session a call is about, in order: the tool's ``session_key`` argument,
    the transport's key, the live session whose project holds the agent's working directory
    (the stdio server's, or the one Claude Code puts in the HTTP URL); and when the transport
    knows no directory either (an agent started outside a shell), the owner's most recently
    active live session, which the hooks of the turn making the call have just touched. ''
    when none is known."""
    key = session_key.strip() or principal.session_key.strip()
    if key:
        return key
    found = _live_session_in(owner=principal.owner, cwd=principal.cwd)
    return found.session_key if found is not None else ""


def _problems(errors: Any, prefix: str = "") -> list[str]:
    """DRF's nested error dict as ``field: message`` lines, API field names mapped back."""
    names = {"digest": "summary", "non_field_errors": ""}
    lines: list[str] = []
    if isinstance(errors, dict):
        for name, value in errors.items():
            label = names.get(str(name), str(name))
            lines += _problems(value, f"{prefix}{label}" if label else prefix)
    elif isinstance(errors, list):
        for index, value in enumerate(errors):
            nested = isinstance(value, dict | list)
            lines += _problems(value, f"{prefix}[{index}]" if nested else prefix)
    else:
        lines.append(f"{prefix}: {errors}" if prefix else str(errors))
    return lines


def _invalid(errors: Any) -> ToolError:
    return ToolError("Invalid arguments: " + "; ".join(_problems(errors)))


def checkpoint_brief(checkpoint: Checkpoint) -> dict[str, Any]:
    """One checkpoint as a list line: ids, when, and a one-line summary (redacted)."""
    text = checkpoint.current_task or next(
        (
            line.strip("#- ").strip()
            for line in checkpoint.digest.splitlines()
            # Headings and the passive digest's "**Project:** …" lines say nothing of the work.
            if line.strip("#- ").strip() and not line.lstrip().startswith(("#", "**"))
        ),
        "",
    )
    line = " ".join(redact(text[: SUMMARY_LINE_CHARS * 4]).split())
    if len(line) > SUMMARY_LINE_CHARS:
        line = line[: SUMMARY_LINE_CHARS - 1] + "…"
    return {
        "id": str(checkpoint.id),
        "session_key": checkpoint.session_key,
        "trigger": checkpoint.trigger,
        "created_at": checkpoint.created_at.isoformat(),
        "summary": line,
    }


def digest_write(
    *,
    principal: McpPrincipal,
    summary: str,
    session_key: str = "",
    goal: str = "",
    current_task: str = "",
    decisions: list[str] | None = None,
    open_questions: list[str] | None = None,
    blockers: list[str] | None = None,
    next_steps: list[str] | None = None,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """Write the agent's checkpoint (trigger ``agent``) of the current session, validated by
    the API's capture serializer and written by ``checkpoint_capture``: redacted, counted
    against the per-session cap, the same row the API and the dashboard show."""
    _require_scope(principal, Scope.WRITE)
    if not summary.strip():
        raise ToolError("Invalid arguments: summary: This field may not be blank.")
    key = session_key_resolve(principal=principal, session_key=session_key)
    if not key:
        raise ToolError(NO_SESSION + ".")
    data: dict[str, Any] = {
        "session_key": key,
        "project": principal.cwd,
        "harness": Harness.API,
        "trigger": Trigger.AGENT,
        "digest": summary,
        "goal": goal,
        "current_task": current_task,
    }
    lists = {
        "decisions": decisions,
        "open_questions": open_questions,
        "blockers": blockers,
        "next_steps": next_steps,
        "files": files,
    }
    data.update({name: value for name, value in lists.items() if value})
    serializer = CheckpointCaptureSerializer(data=data)
    if not serializer.is_valid():
        raise _invalid(serializer.errors)
    checkpoint = serializer.save(owner=principal.owner)
    return {
        "checkpoint_id": str(checkpoint.id),
        "session_key": checkpoint.session_key,
        "project": checkpoint.project_normalized,
        "trigger": checkpoint.trigger,
        "created_at": checkpoint.created_at.isoformat(),
    }


def _validated_key(session_key: str) -> str:
    """The key as the API's capture takes it (``identifier_problem``), else a tool error."""
    problem = identifier_problem(session_key.strip())
    if problem:
        raise ToolError(f"Invalid arguments: session_key: A session key {problem}")
    return session_key.strip()


def recall_prepare(
    *,
    principal: McpPrincipal,
    session_key: str = "",
    project: str = "",
    budget: int | None = None,
) -> dict[str, Any]:
    """The latest checkpoint in full and the recovery context as it would be injected now:
    of the current (or named) session, which falls back on its predecessor's and its
    project's as recovery does; or, with ``project``, of that project's latest checkpoint."""
    _require_scope(principal, Scope.READ)
    owner, config, now = principal.owner, config_get(), timezone.now()
    if session_key:
        session_key = _validated_key(session_key)
    key = (
        ""
        if project and not session_key
        else session_key_resolve(principal=principal, session_key=session_key)
    )
    if key:
        session = session_get(owner=owner, session_key=key)
        if session is None:
            raise ToolError(f"No session '{key}' was found for this token's owner.")
        prepared = recovery_prepare(
            owner=owner, session=session, config=config, now=now, budget=budget
        )
        if prepared is None:
            return {"session_key": key, "match": "", "context": "", "checkpoint": None}
        match, context = prepared
        checkpoint, match_name, text = match.checkpoint, match.match, context.text
    else:
        if not project:
            raise ToolError(NO_SESSION + " or `project`.")
        normalized = lexical_normalize(project)
        latest = (
            checkpoint_list(owner=owner, filters=CheckpointFilters(project=normalized))
            .select_related("session")
            .first()
        )
        if latest is None:
            return {"project": normalized, "match": "", "context": "", "checkpoint": None}
        checkpoint, match_name = latest, "project"
        text = recovery_render(
            checkpoint=latest,
            match="project",
            config=config,
            now=now,
            budget=budget,
            compact_summary=latest.session.compact_summary if latest.session else "",
        ).text
    return {
        "session_key": key,
        "project": checkpoint.project_normalized,
        "match": match_name,
        "context": text,
        # As the API sends it: UUIDs and datetimes as JSON strings.
        "checkpoint": json.loads(
            json.dumps(CheckpointDetailSerializer(checkpoint).data, cls=JSONEncoder)
        ),
    }


def checkpoint_briefs(
    *,
    principal: McpPrincipal,
    session_key: str = "",
    project: str = "",
    limit: int = DEFAULT_LIST_LIMIT,
) -> dict[str, Any]:
    """Recent checkpoints, newest first, as one-line summaries: of ``project``, of the named
    session, or else of the current session's project (the stdio server's own project when
    no session is known)."""
    _require_scope(principal, Scope.READ)
    owner = principal.owner
    if session_key:
        session_key = _validated_key(session_key)
    filters: CheckpointFilters | None = None
    if project:
        filters = CheckpointFilters(project=lexical_normalize(project))
    elif session_key:
        filters = CheckpointFilters(session=session_key)
    else:
        key = session_key_resolve(principal=principal)
        session = session_get(owner=owner, session_key=key) if key else None
        if session is not None:
            filters = (
                CheckpointFilters(project=session.project_normalized)
                if session.project_normalized
                else CheckpointFilters(session=session.session_key)
            )
        elif principal.cwd:
            identity = project_identify(owner=owner, cwd=principal.cwd)
            filters = CheckpointFilters(project=identity.project_normalized)
    if filters is None:
        raise ToolError(NO_SESSION + " or `project`.")
    rows = checkpoint_list(owner=owner, filters=filters)[:limit]
    return {
        "project": filters.project,
        "session_key": filters.session,
        "checkpoints": [checkpoint_brief(row) for row in rows],
    }
