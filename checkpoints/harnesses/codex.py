"""Codex CLI: Claude-style hook payloads in (``hook_event_name``, ``turn_id`` on turn events),
Claude-style hook output out; and the legacy ``notify`` program's ``agent-turn-complete``.

Formats: Codex's hooks (``codex-rs/hooks/schema/generated/*.command.{input,output}.schema.json``
in ``openai/codex``). SessionStart and UserPromptSubmit can add context
(``hookSpecificOutput.additionalContext``); every other reply is an empty success, and no
reply ever carries a blocking decision. A prompt starting with ``/remember`` or ``#`` is a
note to keep.

The cap, 2,500 characters: Codex keeps each hook's model-visible text within 2,500 tokens
(``HOOK_OUTPUT_TOKEN_LIMIT`` in ``codex-rs/hooks/src/output_spill.rs``) and counts a token as
four UTF-8 *bytes* (``approx_token_count``: ``ceil(len(bytes) / 4)``); a longer text is
written to a file and the model sees only its head, tail and path. One character is up to
four bytes, so 2,500 characters is the most that always fits, whatever the script: the
engine injects at most ``cap - 1`` = 2,499 characters, at most 9,996 bytes, 2,499 tokens.
(Four characters a token would allow 10,000 characters, which a text in Greek, Cyrillic or
CJK, or one with many dashes and arrows, would overrun by half or more.)

The legacy ``notify`` program gets its JSON as its last argument, not on stdin; the hook
client's ``--notify`` mode posts it as is. It names no hook event: its ``type``
``agent-turn-complete`` is the end of a turn, so it is read as Stop (``thread-id`` is the
session, ``last-assistant-message`` the reply). Other notify types are counted, not used.
"""

from __future__ import annotations

from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    PayloadError,
    client_block,
    client_fields,
    identifier_field,
    text_field,
)
from checkpoints.harnesses.claude_code import ClaudeStyleAdapter

KINDS = {
    "SessionStart": EventKind.SESSION_START,
    "UserPromptSubmit": EventKind.PROMPT,
    "PreCompact": EventKind.PRE_COMPACT,
    "PostCompact": EventKind.POST_COMPACT,
    "Stop": EventKind.STOP,
    "SessionEnd": EventKind.SESSION_END,
}
CONTEXT_EVENTS = {EventKind.SESSION_START: "SessionStart", EventKind.PROMPT: "UserPromptSubmit"}
REMEMBER_PREFIXES = ("/remember", "#")
NOTIFY_TURN_COMPLETE = "agent-turn-complete"


class CodexAdapter(ClaudeStyleAdapter):
    harness = "codex"
    context_cap_chars = 2_500
    kinds = KINDS
    context_events = CONTEXT_EVENTS
    remember_prefixes = REMEMBER_PREFIXES

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        if "hook_event_name" not in payload and "type" in payload:
            return self._notify(payload)
        return super().parse(payload, event_name=event_name)

    def payload_extra(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {"turn_id": text_field(payload, "turn_id")}

    def _notify(self, payload: dict[str, Any]) -> Event:
        """The legacy ``notify`` payload: kebab-case keys, the thread as the session."""
        notify_type = text_field(payload, "type")
        if not notify_type:
            raise PayloadError("'type' must name the notification.")
        kind = EventKind.STOP if notify_type == NOTIFY_TURN_COMPLETE else EventKind.UNKNOWN
        return Event(
            kind=kind,
            harness=self.harness,
            session_key=identifier_field(payload, "thread-id", required=True),
            name=f"notify:{notify_type}",
            cwd=text_field(payload, "cwd"),
            last_assistant_message=text_field(payload, "last-assistant-message"),
            context_cap_chars=self.context_cap_chars,
            extra={"turn_id": text_field(payload, "turn-id")},
            **client_fields(client_block(payload)),
        )
