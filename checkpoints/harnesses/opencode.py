"""OpenCode: what Signet's plugin (``hooks/opencode/signet.js``) posts, and what it reads back.

OpenCode has no hook settings, only in-process plugins; the plugin builds every body, so the
event is named in the body (``event_in_path`` is False) and all of them post to
``/api/hooks/opencode/``. Two body shapes, OpenCode's own objects passed through:

- a bus event, as the plugin's ``event`` hook received it: ``{"event": {"type", "properties"}}``
  (``session.created``, ``session.idle``, ``session.compacted``, ``session.deleted``, and
  ``file.edited``, which names no session: the body's ``signet.session_id`` then does);
- a hook call: ``{"hook": "chat.message" | "tool.execute.after" |
  "experimental.session.compacting", "input": {...}, "output": {...}}``, and
  ``signet.compaction.context``, not an OpenCode hook: what the plugin posts right after
  ``experimental.session.compacting`` to get the recovery context it pushes into the
  compaction's ``output.context``.

Both carry ``directory`` (the project OpenCode runs in) and the ``signet`` object. The reply
is ``{"context": "..."}`` when there is text to inject, else ``{}``: the plugin prepends it to
the prompt (``chat.message``, holding ``session.created``'s for the first prompt) or pushes it
into the compaction. OpenCode documents no cap on either; the Claude Code cap of 10,000
characters keeps prompts and the summary prompt small. A prompt starting with ``/remember``
is a note to keep.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    PayloadError,
    clean_text,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
)

COMPACTION_CONTEXT = "signet.compaction.context"
KINDS = {
    "session.created": EventKind.SESSION_START,
    "chat.message": EventKind.PROMPT,
    "tool.execute.after": EventKind.TOOL_USE,
    "file.edited": EventKind.TOOL_USE,
    "experimental.session.compacting": EventKind.PRE_COMPACT,
    COMPACTION_CONTEXT: EventKind.SESSION_START,
    "session.compacted": EventKind.POST_COMPACT,
    "session.idle": EventKind.STOP,
    "session.deleted": EventKind.SESSION_END,
}
# The session-start source (or session-end reason) each event stands for.
SOURCES = {
    "session.created": "startup",
    COMPACTION_CONTEXT: "compact",
    "session.deleted": "deleted",
}
CONTEXT_KINDS = frozenset({EventKind.SESSION_START, EventKind.PROMPT})
REMEMBER_PREFIXES = ("/remember",)
# ``apply_patch``/``patch`` name their files in the patch text, one header line each.
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
_PATCH_MOVE = re.compile(r"^\*\*\* Move to: (.+)$", re.MULTILINE)


def _object(payload: dict[str, Any], key: str, *, where: str = "") -> dict[str, Any]:
    value = payload.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"'{where}{key}' must be an object.")
    return value


def _prompt(output: dict[str, Any]) -> str:
    """The user's text: the message's text parts, without those OpenCode added itself."""
    parts = output.get("parts")
    if parts is None:
        return ""
    if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
        raise PayloadError("'output.parts' must be a list of objects.")
    texts = [
        text_field(part, "text", where="output.parts[].")
        for part in parts
        if part.get("type") == "text" and not part.get("synthetic")
    ]
    return "\n".join(text for text in texts if text)


def _tool_files(args: dict[str, Any], directory: str) -> tuple[str, ...]:
    path = args.get("filePath")
    if isinstance(path, str) and path:
        return (clean_text(path),)
    patch = args.get("patchText")
    if not isinstance(patch, str):
        return ()
    found = _PATCH_FILE.findall(patch) + _PATCH_MOVE.findall(patch)
    # Patch paths are relative to the project; the edit tools' are absolute.
    names = (posixpath.join(directory, name.strip()) for name in found if name.strip())
    return tuple(dict.fromkeys(clean_text(name) for name in names))


class OpenCodeAdapter:
    harness = "opencode"
    context_cap_chars = 10_000
    event_in_path = False

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        client = client_block(payload)
        hook = text_field(payload, "hook")
        if hook:
            return self._hook(payload, client, hook)
        if payload.get("event") is None:
            raise PayloadError("'hook' or 'event' is required.")
        return self._bus_event(payload, client)

    def _common(
        self, payload: dict[str, Any], client: dict[str, Any], name: str, session_key: str
    ) -> dict[str, Any]:
        return {
            "kind": KINDS.get(name, EventKind.UNKNOWN),
            "harness": self.harness,
            "session_key": session_key,
            "name": name,
            "cwd": text_field(payload, "directory"),
            "source": SOURCES.get(name, ""),
            "context_cap_chars": self.context_cap_chars,
            **client_fields(client),
        }

    def _hook(self, payload: dict[str, Any], client: dict[str, Any], hook: str) -> Event:
        hook_input = _object(payload, "input")
        session_key = identifier_field(hook_input, "sessionID", required=True, where="input.")
        common = self._common(payload, client, hook, session_key)
        if hook == "chat.message":
            model = _object(hook_input, "model", where="input.")
            prompt = _prompt(_object(payload, "output"))
            return Event(
                **common,
                model=text_field(model, "modelID", where="input.model."),
                prompt=prompt,
                remember=remembered_text(prompt, REMEMBER_PREFIXES),
            )
        if hook == "tool.execute.after":
            args = _object(hook_input, "args", where="input.")
            tool = text_field(hook_input, "tool", where="input.")
            return Event(
                **common, files=_tool_files(args, common["cwd"]), extra={"tool_name": tool}
            )
        return Event(**common)

    def _bus_event(self, payload: dict[str, Any], client: dict[str, Any]) -> Event:
        event = _object(payload, "event")
        name = text_field(event, "type", required=True, where="event.")
        properties = _object(event, "properties", where="event.")
        info = _object(properties, "info", where="event.properties.")
        if "id" in info:
            session_key = identifier_field(info, "id", where="event.properties.info.")
        elif "sessionID" in properties:
            session_key = identifier_field(properties, "sessionID", where="event.properties.")
        else:
            session_key = identifier_field(client, "session_id", where="signet.")
        if not session_key:
            raise PayloadError(f"'{name}' names no session: send 'signet.session_id'.")
        common = self._common(payload, client, name, session_key)
        if name in ("session.created", "session.deleted"):
            common["cwd"] = (
                text_field(info, "directory", where="event.properties.info.") or (common["cwd"])
            )
        if name == "file.edited":
            path = text_field(properties, "file", required=True, where="event.properties.")
            return Event(**common, files=(path,) if path else ())
        return Event(**common)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        if event.kind not in CONTEXT_KINDS or not outcome.context:
            return {}
        return {"context": outcome.context}
