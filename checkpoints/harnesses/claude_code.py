"""Claude Code: hook payloads in (``hook_event_name`` names the event), hook output out.

Formats: Claude Code's hooks reference (input fields per event, ``hookSpecificOutput``).
Only SessionStart and UserPromptSubmit can add context, at most 10,000 characters; every
other reply is an empty success, and no reply ever carries a blocking decision. A prompt
starting with ``#`` or ``/remember`` is a note to keep.
"""

from __future__ import annotations

from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    PayloadSkips,
    clean_text,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
    transcript_parse,
)

EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
# Of a tool's input only the edited file's path is read (``_tool_files``), and nothing of its
# result: a Write carries the whole file in both.
TOOL_PATH_FIELDS = frozenset({"file_path", "notebook_path"})
PAYLOAD_SKIPS: PayloadSkips = {
    "tool_input": TOOL_PATH_FIELDS,
    "tool_response": None,
}
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
REMEMBER_PREFIXES = ("/remember", "#")


def _tool_files(tool_name: str, tool_input: Any) -> tuple[str, ...]:
    if tool_name not in EDIT_TOOLS or not isinstance(tool_input, dict):
        return ()
    path = tool_input.get("file_path") or tool_input.get("notebook_path")  # TOOL_PATH_FIELDS
    return (clean_text(path),) if isinstance(path, str) and path else ()


class ClaudeStyleAdapter:
    """Harnesses whose hooks send Claude Code's shape: ``hook_event_name``, ``session_id``,
    ``cwd``, per-event fields, and ``hookSpecificOutput.additionalContext`` back. A subclass
    names its harness, cap, events (``kinds``), the events that can inject
    (``context_events``) and its note prefixes; ``payload_extra`` adds what its payloads add."""

    harness = ""
    context_cap_chars = 0
    event_in_path = False
    kinds: dict[str, EventKind] = {}
    context_events: dict[EventKind, str] = {}
    remember_prefixes: tuple[str, ...] = ()
    payload_skips: PayloadSkips = PAYLOAD_SKIPS

    def payload_extra(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Harness-specific values kept in ``Event.extra``."""
        return {}

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        name = text_field(payload, "hook_event_name", required=True)
        session_key = identifier_field(payload, "session_id", required=True)
        kind = self.kinds.get(name, EventKind.UNKNOWN)
        client = client_block(payload)
        common: dict[str, Any] = {
            "kind": kind,
            "harness": self.harness,
            "session_key": session_key,
            "name": name,
            "cwd": text_field(payload, "cwd"),
            "transcript_path": text_field(payload, "transcript_path"),
            "model": text_field(payload, "model"),
            "context_cap_chars": self.context_cap_chars,
            **client_fields(client),
        }
        extra = self.payload_extra(payload)
        if kind is EventKind.SESSION_START:
            return Event(**common, source=text_field(payload, "source"), extra=extra)
        if kind is EventKind.PROMPT:
            prompt = text_field(payload, "prompt", required=True)
            remember = remembered_text(prompt, self.remember_prefixes)
            return Event(**common, prompt=prompt, remember=remember, extra=extra)
        if kind is EventKind.TOOL_USE:
            tool_name = text_field(payload, "tool_name")
            files = _tool_files(tool_name, payload.get("tool_input"))
            return Event(**common, files=files, extra={**extra, "tool_name": tool_name})
        if kind is EventKind.REMEMBER:
            note = text_field(payload, "text", required=True)
            return Event(**common, remember=note, extra=extra)
        if kind in (EventKind.PRE_COMPACT, EventKind.POST_COMPACT):
            return Event(
                **common,
                source=text_field(payload, "trigger"),
                compact_summary=text_field(payload, "compact_summary"),
                transcript=transcript_parse(client) if kind is EventKind.PRE_COMPACT else None,
                extra=extra,
            )
        if kind is EventKind.STOP:
            message = text_field(payload, "last_assistant_message")
            return Event(**common, last_assistant_message=message, extra=extra)
        if kind is EventKind.SESSION_END:
            return Event(**common, source=text_field(payload, "reason"), extra=extra)
        return Event(**common, extra=extra)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        hook_name = self.context_events.get(event.kind)
        if hook_name is None or not outcome.context:
            return {}
        return {
            "hookSpecificOutput": {"hookEventName": hook_name, "additionalContext": outcome.context}
        }


class ClaudeCodeAdapter(ClaudeStyleAdapter):
    harness = "claude-code"
    context_cap_chars = 10_000
    kinds = KINDS
    context_events = CONTEXT_EVENTS
    remember_prefixes = REMEMBER_PREFIXES
