"""Gemini CLI: command-hook payloads in (``hook_event_name`` names the event), hook output out.

Formats: Gemini CLI's hooks reference (``docs/hooks/reference.md`` in
``google-gemini/gemini-cli``). SessionStart (``source`` startup, resume or clear) and
BeforeAgent (the prompt) can add context through ``hookSpecificOutput.additionalContext``.
PreCompress fires asynchronously and can neither block nor inject: it only writes the
emergency checkpoint, and the next session (or SessionStart ``resume``) recovers from it.
SessionEnd is best effort (Gemini does not wait for it). Every other reply is ``{}``: on exit
code 0 Gemini parses stdout as JSON, so an empty success must still be a JSON object.

Gemini's reference sets no size for ``additionalContext``; the cap is the one Signet keeps
for every harness that names none, 10,000 characters. A prompt starting with ``/remember``
or ``#`` is a note to keep.
"""

from __future__ import annotations

from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
    transcript_parse,
)

KINDS = {
    "SessionStart": EventKind.SESSION_START,
    "BeforeAgent": EventKind.PROMPT,
    "PreCompress": EventKind.PRE_COMPACT,
    "SessionEnd": EventKind.SESSION_END,
}
CONTEXT_EVENTS = {EventKind.SESSION_START: "SessionStart", EventKind.PROMPT: "BeforeAgent"}
REMEMBER_PREFIXES = ("/remember", "#")


class GeminiAdapter:
    harness = "gemini"
    context_cap_chars = 10_000
    event_in_path = False

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        name = text_field(payload, "hook_event_name", required=True)
        kind = KINDS.get(name, EventKind.UNKNOWN)
        client = client_block(payload)
        common: dict[str, Any] = {
            "kind": kind,
            "harness": self.harness,
            "session_key": identifier_field(payload, "session_id", required=True),
            "name": name,
            "cwd": text_field(payload, "cwd"),
            "transcript_path": text_field(payload, "transcript_path"),
            "context_cap_chars": self.context_cap_chars,
            **client_fields(client),
        }
        if kind is EventKind.SESSION_START:
            return Event(**common, source=text_field(payload, "source"))
        if kind is EventKind.PROMPT:
            prompt = text_field(payload, "prompt", required=True)
            return Event(
                **common, prompt=prompt, remember=remembered_text(prompt, REMEMBER_PREFIXES)
            )
        if kind is EventKind.PRE_COMPACT:
            return Event(
                **common, source=text_field(payload, "trigger"), transcript=transcript_parse(client)
            )
        if kind is EventKind.SESSION_END:
            return Event(**common, source=text_field(payload, "reason"))
        return Event(**common)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        hook_name = CONTEXT_EVENTS.get(event.kind)
        if hook_name is None or not outcome.context:
            return {}
        return {
            "hookSpecificOutput": {"hookEventName": hook_name, "additionalContext": outcome.context}
        }
