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

from checkpoints.harnesses.base import EventKind
from checkpoints.harnesses.claude_code import ClaudeStyleAdapter

KINDS = {
    "SessionStart": EventKind.SESSION_START,
    "BeforeAgent": EventKind.PROMPT,
    "PreCompress": EventKind.PRE_COMPACT,
    "SessionEnd": EventKind.SESSION_END,
}
CONTEXT_EVENTS = {EventKind.SESSION_START: "SessionStart", EventKind.PROMPT: "BeforeAgent"}
REMEMBER_PREFIXES = ("/remember", "#")


class GeminiAdapter(ClaudeStyleAdapter):
    harness = "gemini"
    context_cap_chars = 10_000
    kinds = KINDS
    context_events = CONTEXT_EVENTS
    remember_prefixes = REMEMBER_PREFIXES
