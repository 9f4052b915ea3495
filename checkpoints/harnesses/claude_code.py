"""Claude Code: hook payloads in (``hook_event_name`` names the event), hook output out.

Formats: Claude Code's hooks reference (input fields per event, ``hookSpecificOutput``).
Only SessionStart and UserPromptSubmit can add context; every other reply is an empty
success, and no reply ever carries a blocking decision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from checkpoints.harnesses.base import Event, EventKind, Outcome, PayloadError, clean_text

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
MAX_KEY_CHARS = 255


def _text(payload: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = payload.get(key)
    if value is None:
        if required:
            raise PayloadError(f"'{key}' is required.")
        return ""
    if not isinstance(value, str):
        raise PayloadError(f"'{key}' must be a string, not {type(value).__name__}.")
    return clean_text(value)


def _tool_files(tool_name: str, tool_input: Any) -> tuple[str, ...]:
    if tool_name not in EDIT_TOOLS or not isinstance(tool_input, dict):
        return ()
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    return (clean_text(path),) if isinstance(path, str) and path else ()


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
        session_key = _text(payload, "session_id", required=True).strip()
        if not session_key:
            raise PayloadError("'session_id' must not be empty.")
        if len(session_key) > MAX_KEY_CHARS:
            raise PayloadError(f"'session_id' is longer than {MAX_KEY_CHARS} characters.")
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
            "previous_session_key": _text(client, "previous_session_key"),
            "queued_at": _queued_at(client),
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
