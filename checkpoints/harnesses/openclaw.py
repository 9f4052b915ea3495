"""OpenClaw: the Signet plugin's ``{hook, event, ctx, signet}`` posts in, ``prependContext`` out.

Formats: OpenClaw's plugin hooks (``api.on(name, handler)``; event and ctx shapes in
``src/plugins/types.ts``). OpenClaw runs plugins in-process, so there is no hook payload of its
own on the wire: the plugin (``hooks/openclaw/``) posts the hook's name, its event and its ctx
as they are, with the ``signet`` object every client adds. The event is named in the body
(``hook``), like the fixtures' ``{hook, event, ctx}`` pairs.

The session key is OpenClaw's ``sessionId`` (the transcript ``<sessionId>.jsonl``; the
importer uses the same key), falling back to the ``sessionKey`` routing slot such as
``agent:main:main`` only when a hook names no session id. A ``sessionKey`` outlives resets,
so it would merge every day's session into one.

Only ``before_prompt_build`` can add context (``prependContext``); the plugin also holds a
``session_start`` reply and prepends it to the session's first prompt, since OpenClaw reads
no reply from ``session_start``. No cap is documented for ``prependContext``: the 10,000
characters every other harness allows.
"""

from __future__ import annotations

from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    PayloadError,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
    transcript_parse,
)

KINDS = {
    "session_start": EventKind.SESSION_START,
    "before_prompt_build": EventKind.PROMPT,
    "before_compaction": EventKind.PRE_COMPACT,
    "after_compaction": EventKind.POST_COMPACT,
    "session_end": EventKind.SESSION_END,
}
CONTEXT_KINDS = frozenset({EventKind.SESSION_START, EventKind.PROMPT})
REMEMBER_PREFIXES = ("/remember",)
# What ``signet.compact_summary`` may hold: the plugin reads it from the transcript's
# ``compaction`` entry after a compaction (OpenClaw's after_compaction event has none).
SUMMARY_CHARS = 20_000


def _object(payload: dict[str, Any], key: str) -> dict[str, Any]:
    value = payload.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"'{key}' must be an object.")
    return value


def _session_key(event: dict[str, Any], ctx: dict[str, Any]) -> str:
    for where, source, key in (
        ("ctx.", ctx, "sessionId"),
        ("event.", event, "sessionId"),
        ("ctx.", ctx, "sessionKey"),
        ("event.", event, "sessionKey"),
    ):
        value = identifier_field(source, key, where=where)
        if value:
            return value
    raise PayloadError("'ctx.sessionId' (or 'ctx.sessionKey') is required.")


class OpenClawAdapter:
    harness = "openclaw"
    context_cap_chars = 10_000
    event_in_path = False

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        name = text_field(payload, "hook", required=True)
        event = _object(payload, "event")
        ctx = _object(payload, "ctx")
        kind = KINDS.get(name, EventKind.UNKNOWN)
        client = client_block(payload)
        common: dict[str, Any] = {
            "kind": kind,
            "harness": self.harness,
            "session_key": _session_key(event, ctx),
            "name": name,
            "cwd": text_field(ctx, "workspaceDir", where="ctx."),
            "transcript_path": text_field(event, "sessionFile", where="event."),
            "context_cap_chars": self.context_cap_chars,
            **client_fields(client),
        }
        if kind is EventKind.SESSION_START:
            return Event(**common, source="startup")
        if kind is EventKind.PROMPT:
            prompt = text_field(event, "prompt", where="event.")
            return Event(
                **common, prompt=prompt, remember=remembered_text(prompt, REMEMBER_PREFIXES)
            )
        if kind is EventKind.PRE_COMPACT:
            return Event(**common, transcript=transcript_parse(client))
        if kind is EventKind.POST_COMPACT:
            summary = text_field(client, "compact_summary", where="signet.")[:SUMMARY_CHARS]
            return Event(**common, compact_summary=summary)
        if kind is EventKind.SESSION_END:
            return Event(**common, source=text_field(event, "reason", where="event."))
        return Event(**common)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        if event.kind not in CONTEXT_KINDS or not outcome.context:
            return {}
        return {"prependContext": outcome.context}
