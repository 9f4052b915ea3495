"""The context size of a Claude Code session, from the tail of its transcript.

Shared by the full reader (``claude_code.py``, at PreCompact) and the Stop hook, which sends
``signet.usage`` after every turn. The rules (``protocols.md`` §2): the size is the last
main-chain response's input + cache read + cache creation tokens; every content block of a
response repeats its usage under the same ``message.id`` + ``requestId``, so a response
counts once, and an older response replayed later does not win; a ``compact_boundary``
resets it (the context was rebuilt from a summary).

Light on purpose: the Stop hook runs after every turn, and importing json, re, typing or
dataclasses would cost more than the read. Callers may pass their own JSON decoder.
Nothing here raises for I/O errors or bad content.
"""

from __future__ import annotations

import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

# Stop reads the usage after every turn: the last responses are in the file's last lines.
USAGE_MAX_BYTES = 256 * 1024
# Only used to spot a replayed older response; the cap keeps an endless input bounded.
MAX_USAGE_KEYS = 4096
# Claude Code writes assistant lines with this model for API errors and interruptions; their
# usage is all zeros and their text ("No response requested.") is not the agent's answer.
SYNTHETIC_MODEL = "<synthetic>"

_TOOL_RESULT_MARK = b'"toolUseResult":'
_ASSISTANT_MARK = b'"type":"assistant"'
_USER_MARK = b'"type":"user"'
_SIDECHAIN_MARK = b'"isSidechain":true'
_META_MARK = b'"isMeta":true'  # a hook's or a skill's text, not a turn
# Only lines holding one of these can change the context size: a response or a compaction.
_USAGE_MARKS = (b'"usage"', b'"compact_boundary"')
# Stop runs as the last response starts streaming, often before Claude Code has written it
# to the transcript: it waits at most this long for the response its input names, looking
# again this often (only when the file has grown). The agent waits on the hook meanwhile.
RESPONSE_WAIT_SECONDS = 0.5
RESPONSE_POLL_SECONDS = 0.015


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> tuple[bytes, bool] | None:
    """The file's last ``max_bytes`` from a line start and whether it was cut; None when the
    path is not a regular file. OSError and ValueError (a NUL in the path) pass through."""
    # O_NONBLOCK keeps open() from hanging on a FIFO; it changes nothing for regular files.
    nonblock = getattr(os, "O_NONBLOCK", 0)
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | nonblock)) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        offset = max(0, info.st_size - max_bytes)
        if offset == 0:
            # Bounded even if the agent appends while we read.
            return handle.read(max_bytes), False
        # One byte early: if it is a newline the cut fell on a line start and no line is lost.
        handle.seek(offset - 1)
        chunk = handle.read(max_bytes + 1)
    start = chunk.find(b"\n")
    return (chunk[start + 1 :] if start >= 0 else b""), True


def iter_lines(data: bytes) -> Iterator[bytes]:
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        yield data[start:end]
        start = end + 1


def is_tool_result(line: bytes) -> bool:
    """Whether a raw line is a tool result, spotted without a JSON parse.

    Tool results (file contents, command output) are most of a transcript's bytes and none
    of its usage. A quote inside a JSON string is escaped, so these bare-quoted markers can
    only be the line's own keys and values; a line that might be an assistant turn is never
    taken for one.
    """
    return _TOOL_RESULT_MARK in line and _ASSISTANT_MARK not in line


def _tokens(value: object) -> int | None:
    # bool is an int subclass; a JSON true is not a token count.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def context_size(usage: object) -> int | None:
    """input + cache read + cache creation tokens of one ``usage``; None if it is unusable."""
    if not isinstance(usage, dict):
        return None
    total = _tokens(usage.get("input_tokens"))
    if total is None:
        return None
    for field in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        # Older versions omit the cache fields; a present field of the wrong type is corrupt.
        count = _tokens(usage.get(field, 0))
        if count is None:
            return None
        total += count
    return total


class UsageTracker:
    """The context size of the last main-chain response, fed records in file order."""

    def __init__(self) -> None:
        self.context_tokens: int | None = None
        self.model = ""
        self.key: tuple[str, str] | None = None
        self.seen: dict[tuple[str, str], None] = {}

    def feed(self, record: dict[str, Any]) -> None:
        """Take one transcript record (any type: only responses and compactions count)."""
        if record.get("isSidechain", False) is not False:  # a subagent's context is its own
            return
        kind = record.get("type")
        if kind == "system" and record.get("subtype") == "compact_boundary":
            self.compacted()
            return
        message = record.get("message")
        if kind != "assistant" or not isinstance(message, dict):
            return
        model = message.get("model")
        if model == SYNTHETIC_MODEL:
            return
        if isinstance(model, str) and model:
            self.model = model
        self.response(record, message)

    def response(self, record: dict[str, Any], message: dict[str, Any]) -> None:
        """A main-chain assistant line (not a synthetic one)."""
        size = context_size(message.get("usage"))
        if size is None:
            return
        message_id, request_id = message.get("id"), record.get("requestId")
        if isinstance(message_id, str) and isinstance(request_id, str):
            key = (message_id, request_id)
            # Every content block of one response repeats its usage; a key seen before that
            # is not the current response is a replayed older one and must not win.
            if key in self.seen and key != self.key:
                return
            self.key = key
            self.seen[key] = None
            if len(self.seen) > MAX_USAGE_KEYS:
                del self.seen[next(iter(self.seen))]
        else:
            self.key = None
        self.context_tokens = size

    def compacted(self) -> None:
        """A compaction boundary: earlier usage no longer applies."""
        self.context_tokens = None
        self.key = None


def read_usage(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = USAGE_MAX_BYTES,
    loads: Callable[[bytes], Any] | None = None,
) -> dict[str, Any] | None:
    """``{"context_tokens": N, "model": "..."}`` from the last ``max_bytes`` of the transcript:
    what the client sends as ``signet.usage`` at Stop. None when the file cannot be read or
    no main-chain response follows the tail's last compaction. Only lines that can hold a
    usage or a compaction are parsed, with ``loads`` (``json.loads`` by default).
    """
    return _scan(path, max_bytes=max_bytes, loads=loads, watch=None)


def read_usage_after(
    path: str | os.PathLike[str],
    *,
    response: str,
    prompt_id: str = "",
    wait: float = RESPONSE_WAIT_SECONDS,
    max_bytes: int = USAGE_MAX_BYTES,
    loads: Callable[[bytes], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any] | None:
    """``read_usage`` once the transcript holds the turn's last response, whose text is
    ``response`` (Stop's ``last_assistant_message``), waiting at most ``wait`` seconds for it.

    The response must be the last text of the main chain and, when the tail holds the line
    of the turn's prompt (``prompt_id``, Stop's own), come after it: a previous turn that
    said the same words is not this one. Once the wait is over, the usage is what the file
    holds then.
    """
    expected = response.strip()
    if not expected or wait <= 0:
        return read_usage(path, max_bytes=max_bytes, loads=loads)
    mark = b'"promptId":"' + prompt_id.encode("utf-8", "replace") + b'"' if prompt_id else b""
    watch = _ResponseWatch(expected, mark)
    return _wait_for(
        path, watch, wait=wait, max_bytes=max_bytes, loads=loads, clock=clock, sleep=sleep
    )


def read_answer(
    path: str | os.PathLike[str],
    *,
    wait: float = RESPONSE_WAIT_SECONDS,
    max_bytes: int = USAGE_MAX_BYTES,
    loads: Callable[[bytes], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, Any] | None, str]:
    """``read_usage`` and the main agent's last text (unclipped; '' for none since the tail's
    last compaction), for a Stop that does not say what the turn's last response was
    (Claude Code before 2.1 sends no ``last_assistant_message``).

    A turn ends on a response with text and no tool call, so the response is in the
    transcript once the last main-chain user or assistant line is one with text: that is
    waited for, at most ``wait`` seconds; then what the file holds is read.
    """
    watch = _AnswerWatch()
    usage = _wait_for(
        path, watch, wait=wait, max_bytes=max_bytes, loads=loads, clock=clock, sleep=sleep
    )
    return usage, watch.last_text


def _wait_for(
    path: str | os.PathLike[str],
    watch: _ResponseWatch,
    *,
    wait: float,
    max_bytes: int,
    loads: Callable[[bytes], Any] | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[str, Any] | None:
    """The usage once a read's lines satisfy ``watch`` (read again each time the file grew),
    or once ``wait`` seconds have passed: what the file holds then."""
    give_up = clock() + wait
    size = -1
    usage = None
    while True:
        try:
            now_size = os.stat(path).st_size
        except (OSError, ValueError):  # ValueError: a path with a NUL byte
            return None
        if now_size != size:
            size = now_size
            usage = _scan(path, max_bytes=max_bytes, loads=loads, watch=watch)
            if watch.found():
                return usage
            watch.reset()
        if clock() >= give_up:
            return usage
        sleep(RESPONSE_POLL_SECONDS)


class _ResponseWatch:
    """Whether the lines of one read hold the expected last response (``read_usage_after``)."""

    def __init__(self, expected: str = "", prompt_mark: bytes = b"") -> None:
        self.expected = expected
        self.prompt_mark = prompt_mark
        self.prompt_seen = False
        self.last_text = ""

    def reset(self) -> None:
        """Before another read of the tail. The prompt is written as the turn starts: after
        a read whose tail lacked it (a long turn, a version without prompt ids), the text
        alone decides."""
        if not self.prompt_seen:
            self.prompt_mark = b""
        self.prompt_seen = False
        self.last_text = ""

    def line(self, line: bytes) -> None:
        """Any line: the turn's own user lines (its prompt, its tool results) come before
        its last response, and reset the text seen."""
        if self.prompt_mark and self.prompt_mark in line:
            self.prompt_seen = True
            self.last_text = ""

    def record(self, record: dict[str, Any]) -> None:
        """A parsed line that can hold a usage."""
        message = record.get("message")
        if (
            record.get("type") != "assistant"
            or record.get("isSidechain", False) is not False
            or not isinstance(message, dict)
        ):
            return
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and text.strip():
                    self.last_text = text.strip()

    def found(self) -> bool:
        text = self.last_text
        after_prompt = self.prompt_seen or not self.prompt_mark
        return (
            after_prompt and bool(text) and (text == self.expected or self.expected.endswith(text))
        )


class _AnswerWatch(_ResponseWatch):
    """Whether the last main-chain user or assistant line of one read is a response with
    text (``read_answer``); ``last_text`` is the newest such text since a compaction."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = False

    def reset(self) -> None:
        super().reset()
        self.answered = False

    def line(self, line: bytes) -> None:
        if _USER_MARK in line and _SIDECHAIN_MARK not in line and _META_MARK not in line:
            self.answered = False  # a prompt, a tool result: the answer is still to come

    def record(self, record: dict[str, Any]) -> None:
        if record.get("subtype") == "compact_boundary":  # what came before is not the latest
            self.last_text = ""
            self.answered = False
            return
        message = record.get("message")
        if (
            record.get("type") != "assistant"
            or record.get("isSidechain", False) is not False
            or not isinstance(message, dict)
        ):
            return
        if message.get("model") == SYNTHETIC_MODEL:
            self.answered = True  # an API error ended the turn: its text is not the agent's
            return
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and text.strip():
                    self.last_text = text.strip()
                    self.answered = True
            elif block.get("type") == "tool_use":
                self.answered = False  # a call: the turn goes on

    def found(self) -> bool:
        return self.answered


def _scan(
    path: str | os.PathLike[str],
    *,
    max_bytes: int,
    loads: Callable[[bytes], Any] | None,
    watch: _ResponseWatch | None,
) -> dict[str, Any] | None:
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    try:
        tail = read_tail(path, max_bytes)
    except (OSError, ValueError):  # ValueError: a path with a NUL byte
        return None
    if tail is None:
        return None
    if loads is None:
        import json

        loads = json.loads
    tracker = UsageTracker()
    for line in iter_lines(tail[0]):
        if watch is not None:
            watch.line(line)
        if is_tool_result(line) or not any(mark in line for mark in _USAGE_MARKS):
            continue
        try:
            record = loads(line)
        except (ValueError, RecursionError):  # bad JSON, bad UTF-8, absurd nesting
            continue
        if isinstance(record, dict):
            tracker.feed(record)
            if watch is not None:
                watch.record(record)
    if tracker.context_tokens is None:
        return None
    return {"context_tokens": tracker.context_tokens, "model": tracker.model}
