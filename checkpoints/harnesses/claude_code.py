"""Claude Code: hook payloads in (``hook_event_name`` names the event), hook output out.

Formats: Claude Code's hooks reference (input fields per event, ``hookSpecificOutput``).
Only SessionStart and UserPromptSubmit can add context; every other reply is an empty
success, and no reply ever carries a blocking decision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from checkpoints.harnesses.base import (
    ContextUsage,
    Event,
    EventKind,
    Outcome,
    PayloadError,
    TranscriptExtract,
    clean_text,
    identifier_problem,
)

EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
KINDS = {
    "SessionStart": EventKind.SESSION_START,
    "UserPromptSubmit": EventKind.PROMPT,
    "PostToolUse": EventKind.TOOL_USE,
    "PreCompact": EventKind.PRE_COMPACT,
    "PostCompact": EventKind.POST_COMPACT,
    "Stop": EventKind.STOP,
    "SessionEnd": EventKind.SESSION_END,
    # Not a Claude Code event: what a client sends to keep a note explicitly.
    "Remember": EventKind.REMEMBER,
}
CONTEXT_EVENTS = {EventKind.SESSION_START: "SessionStart", EventKind.PROMPT: "UserPromptSubmit"}
# What ``signet.transcript`` may hold: the client reader's own bounds, checked again here.
TRANSCRIPT_ITEMS = 100
TRANSCRIPT_TEXT_CHARS = 4000
# ``signet.usage.context_tokens`` is kept up to the column's range on PostgreSQL.
USAGE_MAX_TOKENS = 2**31 - 1
USAGE_MODEL_CHARS = 128


def _text(payload: dict[str, Any], key: str, *, required: bool = False, where: str = "") -> str:
    value = payload.get(key)
    if value is None:
        if required:
            raise PayloadError(f"'{where}{key}' is required.")
        return ""
    if not isinstance(value, str):
        raise PayloadError(f"'{where}{key}' must be a string, not {type(value).__name__}.")
    return clean_text(value)


def _tool_files(tool_name: str, tool_input: Any) -> tuple[str, ...]:
    if tool_name not in EDIT_TOOLS or not isinstance(tool_input, dict):
        return ()
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    return (clean_text(path),) if isinstance(path, str) and path else ()


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PayloadError(f"'signet.transcript.{key}' must be a list of strings.")
    return tuple(clean_text(item)[:TRANSCRIPT_TEXT_CHARS] for item in value[-TRANSCRIPT_ITEMS:])


def _todos(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    problem = "'signet.transcript.todos' must be a list of {content, status} objects."
    if not isinstance(value, list):
        raise PayloadError(problem)
    todos = []
    for item in value[:TRANSCRIPT_ITEMS]:
        if not isinstance(item, dict):
            raise PayloadError(problem)
        content, status = item.get("content"), item.get("status")
        if not isinstance(content, str) or not isinstance(status, str):
            raise PayloadError(problem)
        todos.append((clean_text(content)[:TRANSCRIPT_TEXT_CHARS], clean_text(status)[:32]))
    return tuple(todos)


def _transcript(client: dict[str, Any]) -> TranscriptExtract | None:
    """``signet.transcript``: what the hook client read from the transcript's tail."""
    facts = client.get("transcript")
    if facts is None:
        return None
    if not isinstance(facts, dict):
        raise PayloadError("'signet.transcript' must be an object.")
    tokens = facts.get("context_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        raise PayloadError("'signet.transcript.context_tokens' must be an integer or null.")

    def text(key: str) -> str:
        return _text(facts, key, where="signet.transcript.")[:TRANSCRIPT_TEXT_CHARS]

    return TranscriptExtract(
        current_task=text("current_task"),
        todos=_todos(facts.get("todos")),
        recent_prompts=_strings(facts.get("recent_prompts"), "recent_prompts"),
        modified_files=_strings(facts.get("modified_files"), "modified_files"),
        last_assistant_message=text("last_assistant_message"),
        git_branch=text("git_branch"),
        context_tokens=tokens,
    )


def usage_parse(client: dict[str, Any]) -> ContextUsage | None:
    """``signet.usage``: ``{"context_tokens": N, "model": "..."}`` from any client that counts
    its context (the Claude Code hook client reads it from the transcript at Stop)."""
    usage = client.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise PayloadError("'signet.usage' must be an object.")
    tokens = usage.get("context_tokens")
    if tokens is None:
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int | float) or tokens != tokens:
        raise PayloadError("'signet.usage.context_tokens' must be a number.")
    if tokens < 0:
        raise PayloadError("'signet.usage.context_tokens' must not be negative.")
    model = _text(usage, "model", where="signet.usage.")[:USAGE_MODEL_CHARS]
    return ContextUsage(context_tokens=int(min(tokens, USAGE_MAX_TOKENS)), model=model)


def _identifier(payload: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = _text(payload, key, required=required).strip()
    if not value and not required:
        return ""
    problem = identifier_problem(value)
    if problem:
        raise PayloadError(f"'{key}' {problem}")
    return value


def _queued_at(client: dict[str, Any]) -> datetime | None:
    """``signet.queued_at``: when the client's outbox took the event (ISO 8601), if it did."""
    raw = _text(client, "queued_at")
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise PayloadError("'signet.queued_at' must be an ISO 8601 time.") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


class ClaudeCodeAdapter:
    harness = "claude-code"

    def parse(self, payload: dict[str, Any]) -> Event:
        name = _text(payload, "hook_event_name", required=True)
        session_key = _identifier(payload, "session_id", required=True)
        kind = KINDS.get(name, EventKind.UNKNOWN)
        client = payload.get("signet")
        if client is not None and not isinstance(client, dict):
            raise PayloadError("'signet' must be an object.")
        client = client or {}
        common: dict[str, Any] = {
            "kind": kind,
            "harness": self.harness,
            "session_key": session_key,
            "name": name,
            "cwd": _text(payload, "cwd"),
            "transcript_path": _text(payload, "transcript_path"),
            "model": _text(payload, "model"),
            "client_project": _text(client, "project_normalized"),
            "client_git_root": _text(client, "git_root"),
            "git_branch": _text(client, "git_branch"),
            "git_head": _text(client, "git_head"),
            "previous_session_key": _identifier(client, "previous_session_key"),
            "queued_at": _queued_at(client),
            "usage": usage_parse(client),
        }
        if kind is EventKind.SESSION_START:
            return Event(**common, source=_text(payload, "source"))
        if kind is EventKind.PROMPT:
            return Event(**common, prompt=_text(payload, "prompt", required=True))
        if kind is EventKind.TOOL_USE:
            tool_name = _text(payload, "tool_name")
            files = _tool_files(tool_name, payload.get("tool_input"))
            return Event(**common, files=files, extra={"tool_name": tool_name})
        if kind is EventKind.REMEMBER:
            return Event(**common, remember=_text(payload, "text", required=True))
        if kind in (EventKind.PRE_COMPACT, EventKind.POST_COMPACT):
            return Event(
                **common,
                source=_text(payload, "trigger"),
                compact_summary=_text(payload, "compact_summary"),
                transcript=_transcript(client) if kind is EventKind.PRE_COMPACT else None,
            )
        if kind is EventKind.STOP:
            return Event(**common, last_assistant_message=_text(payload, "last_assistant_message"))
        if kind is EventKind.SESSION_END:
            return Event(**common, source=_text(payload, "reason"))
        return Event(**common)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        hook_name = CONTEXT_EVENTS.get(event.kind)
        if hook_name is None or not outcome.context:
            return {}
        return {
            "hookSpecificOutput": {"hookEventName": hook_name, "additionalContext": outcome.context}
        }
