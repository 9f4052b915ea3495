"""Bounded reader for Gemini CLI chat recordings (``~/.gemini/tmp/<project>/chats/
session-*.jsonl``, the ``transcript_path`` of Gemini's hook payloads), run by the hook
client at PreCompress.

The format, from ``google-gemini/gemini-cli`` (``packages/core/src/services/
chatRecordingService.ts`` and ``chatRecordingTypes.ts``): since 0.39 (April 2026, "migrate
chat recording to JSONL streaming") an append-only JSONL file whose lines are

- the metadata, first: ``{"sessionId", "projectHash", "startTime", "lastUpdated", "kind"?}``;
- a message, ``{"id", "timestamp", "type": "user"|"gemini"|"info"|"error"|"warning",
  "content", "displayContent"?}``, ``content`` a ``PartListUnion`` (a string, a part or a
  list of parts: ``{"text"}``, ``{"functionResponse"}``, ``{"inlineData"}``…); a ``gemini``
  message adds ``model``, ``tokens: {input, output, cached, thoughts, tool, total}`` and
  ``toolCalls: [{"id", "name", "args", "status": "success"|"error"|"cancelled"…}]``. A
  message is written again, whole, under the same id when it gains tool calls or tokens;
- ``{"$set": {...}}``, a metadata update; with ``messages`` the whole conversation as it
  now stands (after a compression or a masking of tool output);
- ``{"$rewindTo": id}``.

Before 0.39 the file was ``session-*.json``, one JSON document ``{"sessionId", …,
"messages": [...]}`` rewritten at every message; it is read whole, up to 8 MiB.

What a person typed is a ``user`` message's ``displayContent`` (else its ``content``) text;
not prompts: tool results (user messages holding ``functionResponse`` parts), the hook
context Gemini appends as a ``<hook_context>`` part, its ``<session_context>`` environment
message, slash commands, the compression's ``<state_snapshot>`` summary (kept as the
compaction summary), and what a ``/rewind`` took back. The current task is the
``write_todos`` list's ``in_progress`` item; modified files are the ``file_path`` of
successful ``replace`` and ``write_file`` calls (shell edits are not counted); the context
size is the last response's ``tokens.input`` (its prompt tokens). Gemini records no git
branch.

Only the tail of a JSONL file is read (2 MiB), every line on its own; nothing here raises
for I/O errors or bad content. Imports are what the hook client has loaded already.
"""

from __future__ import annotations

import os

from .facts import Facts, Prompts, decode, starts_with_any
from .usage import iter_lines, read_tail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
LEGACY_MAX_BYTES = 8 * 1024 * 1024

# Parts of a user message that Gemini adds itself (``isIgnoredUserContent`` in
# ``packages/core/src/utils/sessionUtils.ts``), lower case.
HARNESS_PREFIXES = ("<hook_context>", "<session_context>")
SNAPSHOT_PREFIX = "<state_snapshot>"
# The model's answer Gemini records after a compression summary: not the agent's words.
SNAPSHOT_ACK = "Got it. Thanks for the additional context!"
EDIT_TOOLS = ("replace", "write_file")
TODO_TOOL = "write_todos"
SUCCESS = "success"


def read_chat(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, loads: Any = None
) -> dict[str, Any] | None:
    """The ``signet.transcript`` facts of the chat recording at ``path``: the last
    ``max_bytes`` of a JSONL recording, or a legacy ``.json`` one whole (None when it is
    over 8 MiB); None when the path is missing, not a regular file or unreadable."""
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    if loads is None:
        import json

        loads = json.loads
    if os.fspath(path).endswith(".json"):
        return _read_legacy(path, loads)
    try:
        tail = read_tail(path, max_bytes)
    except (OSError, ValueError):
        return None
    if tail is None:
        return None
    data, truncated = tail
    return parse_lines(iter_lines(data), truncated=truncated, loads=loads)


def _read_legacy(path: str | os.PathLike[str], loads: Any) -> dict[str, Any] | None:
    try:
        found = read_tail(path, LEGACY_MAX_BYTES)
    except (OSError, ValueError):
        return None
    if found is None or found[1]:
        return None  # not a file, or too big to read whole
    try:
        document = loads(found[0])
    except (ValueError, RecursionError):
        # Not one document: a recording that kept the old name, read as lines.
        return parse_lines(iter_lines(found[0]), loads=loads)
    reader = _Reader()
    if isinstance(document, dict):
        reader.feed(document)
    return reader.payload(truncated=False)


def parse_lines(
    lines: Iterable[str | bytes], *, truncated: bool = False, loads: Any = None
) -> dict[str, Any]:
    """The facts of recording lines in file order."""
    if loads is None:
        import json

        loads = json.loads
    reader = _Reader()
    for raw in lines:
        record = decode(raw, loads) if isinstance(raw, (str, bytes)) else None
        if record is not None:
            reader.feed(record)
    return reader.payload(truncated=truncated)


def _parts(content: object) -> list[object]:
    if isinstance(content, list):
        return content
    if content is None:
        return []
    return [content]


def _text(content: object) -> str | None:
    """The text of a ``PartListUnion``, thoughts and harness parts left out; None when it
    holds a tool result (a ``functionResponse`` part)."""
    texts = []
    for part in _parts(content):
        text: object = part
        if isinstance(part, dict):
            if "functionResponse" in part:
                return None
            text = None if part.get("thought") is True else part.get("text")
        if isinstance(text, str) and not starts_with_any(text, HARNESS_PREFIXES):
            texts.append(text)
    return "".join(texts).strip()


class _Reader:
    def __init__(self) -> None:
        self.facts = Facts()
        # Message ids, in the order first met, and their place in that order.
        self.seen: dict[str, int] = {}
        self.snapshots: dict[str, None] = {}
        self.prompts: list[tuple[int, str]] = []  # (the message's place, what was typed)

    def feed(self, record: dict[str, Any]) -> None:
        update = record.get("$set")
        if isinstance(update, dict):
            messages = update.get("messages")
            if isinstance(messages, list):
                self._rewritten(messages)
            return
        if "$rewindTo" in record:
            self._rewind(record["$rewindTo"])
            return
        if isinstance(record.get("id"), str) and isinstance(record.get("type"), str):
            self._message(record)
            return
        # The metadata line (or a whole legacy record on one line).
        messages = record.get("messages")
        if isinstance(record.get("sessionId"), str) and isinstance(messages, list):
            self._rewritten(messages)

    def _rewritten(self, messages: list[object]) -> None:
        """The conversation as a whole (``$set.messages``, a legacy record): the messages
        already met are not news; the ones after the last of them are, and so is a
        compression summary wherever it stands (it opens the rebuilt history). When none
        was met, the list is what came before the rest of the tail: all of it is news."""
        records = [m for m in messages if isinstance(m, dict) and isinstance(m.get("id"), str)]
        last_seen = -1
        for index, message in enumerate(records):
            if message["id"] in self.seen:
                last_seen = index
        for index, message in enumerate(records):
            if message["id"] in self.seen:
                continue
            if index > last_seen or self._is_snapshot(message):
                self._message(message)

    @staticmethod
    def _is_snapshot(message: dict[str, Any]) -> bool:
        text = _text(message.get("content"))
        return message.get("type") == "user" and (text or "").startswith(SNAPSHOT_PREFIX)

    def _rewind(self, ident: object) -> None:
        """``/rewind``: the conversation from message ``ident`` on is gone, and so are its
        requests (an id the tail does not hold: all of it, as Gemini reads it). The files
        it changed and the list it wrote stay: they are on disk, or were the work."""
        place = self.seen.get(ident, -1) if isinstance(ident, str) else -1
        self.prompts = [(at, text) for at, text in self.prompts if at < place]

    def _message(self, message: dict[str, Any]) -> None:
        ident, kind = message["id"], message.get("type")
        again = ident in self.seen
        if not again:
            self.seen[ident] = len(self.seen)
        if kind == "user":
            if not again:
                self._user(ident, message)
        elif kind == "gemini":
            self._gemini(message)

    def _user(self, ident: str, message: dict[str, Any]) -> None:
        content = _text(message.get("content"))
        if content is None:
            return  # a tool result
        if content.startswith(SNAPSHOT_PREFIX):
            if ident not in self.snapshots:
                self.snapshots[ident] = None
                self.facts.compacted(content)
            return
        display = _text(message.get("displayContent")) if "displayContent" in message else None
        for text in (display, content):
            # A custom command shows as "/name args" and is sent expanded: the expansion
            # is the request. A bare slash command or "?" never reached the model.
            if text and not text.startswith(("/", "?")):
                self.prompts.append((self.seen[ident], text))
                return

    def _gemini(self, message: dict[str, Any]) -> None:
        model = message.get("model")
        if isinstance(model, str) and model:
            self.facts.model = model
        tokens = message.get("tokens")
        size = tokens.get("input") if isinstance(tokens, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            self.facts.context_tokens = size
        text = _text(message.get("content"))
        if text and text != SNAPSHOT_ACK:
            self.facts.assistant(text)
        calls = message.get("toolCalls")
        if not isinstance(calls, list):
            return
        for call in calls:
            if not isinstance(call, dict):
                continue
            name, args, status = call.get("name"), call.get("args"), call.get("status")
            ident = call.get("id")
            ident = ident if isinstance(ident, str) else ""
            if not isinstance(args, dict):
                continue
            if name == TODO_TOOL:
                self.facts.set_todos(args.get("todos"), "description")
            elif name in EDIT_TOOLS:
                if status == SUCCESS:
                    self.facts.touch(args.get("file_path"), ident)
                else:
                    self.facts.untouch(ident)

    def payload(self, *, truncated: bool) -> dict[str, Any]:
        said = Prompts()
        for _, text in self.prompts:  # as many as the bytes read could hold
            said.add(text)
        return self.facts.payload(truncated=truncated, prompts=said)
