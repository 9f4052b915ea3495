"""What a Claude Code transcript holds that the server may have missed, since the last event.

Claude Code posts ``http`` hooks itself, once and with no retry (UserPromptSubmit,
PostToolUse and PostCompact were, in earlier installs): in an outage they are lost, though
the transcript holds them; and an outbox full for too long drops its oldest events. So each
hook event sends, as ``signet.sync``, the prompts, edits and compactions written to the
transcript since the previous one of the session, whether or not the server got them: each
carries the id both sides know (the line's ``promptId`` is the hook's ``prompt_id``; a
``tool_use`` block's ``id`` is PostToolUse's ``tool_use_id``), and the server applies what
it lacks, once and in order (``checkpoints/services/engine/backlog.py``). Prompts are what a
person typed (``prompts.prompt_text``), and an edit is sent once its result shows that it did
not fail and was not rejected: an edit whose result is not written yet (PostToolUse runs
before it is) waits, with the lines after it, for the next event. What the user says in a
tool result, which no hook carries, is sent too, under the id of the call it answers: the
text typed on rejecting a call (a prompt) and the answers to the agent's questions
(``decision`` events, one for each answer). A message typed while the agent was busy is not
sent from its queue line: that has no id a hook knows, and it may still come back as a user
line that has one.

Beside the events, what the new lines say of the session now: the newest ``gitBranch`` a
line carries (not ``HEAD``, a detached head's, nor an empty one: Claude Code reads it where
the agent works, so a branch switched mid-session shows here first), and the main agent's
newest text with its time, clipped as the transcript reader clips it
(``claude_code.message_text``), unless a compaction came after it. A session killed
mid-turn sends no Stop: this is what it last said, as of its last hook.

Where the last one stopped is kept per session in a small file beside the outbox
(``<outbox folder>/sync/<session_id>.json``: the transcript's path and a byte offset at a
line start), moved on once the event is delivered or queued in the outbox, which then
carries it. The first event of a session seen here starts at the transcript's end (what
came before was not ours to send). Each event reads at most ``SYNC_MAX_BYTES`` and sends at
most ``SYNC_MAX_EVENTS``; the next takes over where it stopped, so any outage is caught up.

A session killed mid-turn (a crash, a closed terminal) fires no hook for its last lines: what
the agent said after its last Read or Bash call would never be sent. So a new session's
start (Claude Code's ``startup``) first catches up the other sessions of its project folder
whose transcripts grew since their last event (``sync_stale``: at most
``CATCH_UP_SESSIONS``, the newest first, modified within ``CATCH_UP_MAX_AGE_SECONDS``, and
only ones with a cursor, seen live here); the hook client sends each as that session's
``SignetSync`` event, before the new session's start, whose project flush then writes them.

Standard library, and only what the hook has loaded: it runs at every event.
"""

from __future__ import annotations

import os
import stat
import time

from .claude_code import (
    EDIT_TOOLS,
    ERROR_MARK,
    MAX_PATH_CHARS,
    _text_of,
    answer_decisions,
    message_text,
    rejection_text,
    result_mark,
    summary_text,
    typed_text,
    user_said,
)
from .usage import SYNTHETIC_MODEL, is_tool_result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO

    Loads = Callable[[Any], Any]
    Dumps = Callable[[Any], str]

SYNC_MAX_BYTES = 8 * 1024 * 1024
SYNC_MAX_EVENTS = 100
# ...and text (prompts, summaries, paths) of at most about this many characters, so that the
# event stays well within the server's 1 MiB even where each is sent as a six-byte escape.
SYNC_MAX_CHARS = 64_000
# A line longer than this is skipped unread: no prompt is, and an edit's content is not needed.
SKIP_CHUNK_BYTES = 1024 * 1024
PROMPT_CHARS = 2000
MAX_BRANCH_CHARS = 255
# UserPromptSubmit carries ``prompt_id`` from this version on: before it, the server could
# not tell a prompt it got from one it missed, so those are not sent.
PROMPT_ID_VERSION = (2, 1, 196)
# Cursors of sessions untouched this long are deleted when a new one is made.
STATE_MAX_AGE_SECONDS = 30 * 24 * 3600
# A new session's catch-up of its project's other sessions (``sync_stale``).
CATCH_UP_SESSIONS = 3
CATCH_UP_MAX_AGE_SECONDS = 6 * 3600
# Transcripts of the folder looked at, at most: a folder of thousands costs one listing.
CATCH_UP_MAX_FILES = 200
_SESSION_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_MARKS = (b'"type":"user"', b'"type":"assistant"')
# Bare quotes: a line's own key, never text inside a string (where quotes are escaped).
_BRANCH_KEY = b'"gitBranch":"'
_BOUNDARY_MARK = b'"compact_boundary"'
# What Claude Code writes for a detached head: no branch to name.
_DETACHED = b"HEAD"


class Sync:
    """The events found for one hook event (``events``) and the cursor to keep once that
    event is delivered or queued (``commit``)."""

    def __init__(
        self,
        state_path: str,
        transcript: str,
        offset: int,
        events: list[Any],
        dumps: Dumps,
        latest: dict[str, Any] | None = None,
    ) -> None:
        self.state_path = state_path
        self.transcript = transcript
        self.offset = offset
        self.events = events
        self.dumps = dumps
        # What the new lines say of the session now: ``git_branch`` and
        # ``last_assistant_message`` ({"text", "at"}), each only when they hold one.
        self.latest = latest or {}

    def payload(self) -> dict[str, Any] | None:
        """``signet.sync``: the events and what the lines say of the session now; None when
        the lines held nothing to send."""
        if not self.events and not self.latest:
            return None
        return {"events": self.events, **self.latest}

    def commit(self) -> None:
        """Keep the new cursor; best-effort (a cursor not kept sends the same events again,
        which the server recognises)."""
        state = self.dumps({"transcript": self.transcript, "offset": self.offset})
        try:  # noqa: SIM105 (contextlib takes longer to import than the request)
            _state_write(self.state_path, state.encode("ascii"))
        except OSError:
            pass


def sync_collect(
    payload: dict[str, Any], *, state_dir: str, loads: Loads, dumps: Dumps
) -> Sync | None:
    """What the transcript of the payload's session holds since the last hook event, each
    JSON line read with ``loads`` (the cursor written with ``dumps``); None when the payload
    names no session or transcript."""
    session_id = payload.get("session_id")
    path = payload.get("transcript_path")
    if not isinstance(session_id, str) or not _is_session_id(session_id):
        return None
    if not isinstance(path, str) or not path:
        return None
    state_path = os.path.join(state_dir, f"{session_id}.json")
    state = _state_read(state_path, loads)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        size = 0  # not written yet: what it will hold is ours to send
    else:
        if not stat.S_ISREG(info.st_mode):
            return None  # a FIFO would block the read
        size = info.st_size
    offset = state.get("offset") if state is not None else None
    if state is None or state.get("transcript") != path or not isinstance(offset, int):
        if state is None:
            _prune(state_dir)
        return Sync(state_path, path, size, [], dumps)
    if not 0 <= offset <= size:
        return Sync(state_path, path, size, [], dumps)  # rewritten: start again at its end
    events, offset, latest = _read_events(path, offset, size, loads)
    return Sync(state_path, path, offset, events, dumps, latest)


def sync_stale(
    payload: dict[str, Any], *, state_dir: str, loads: Loads, now: float | None = None
) -> list[tuple[str, str]]:
    """The other sessions of the folder of the payload's transcript whose transcripts grew
    past their cursor, as ``(session_id, transcript path)``, the most recently modified first:
    at most ``CATCH_UP_SESSIONS``, each modified within ``CATCH_UP_MAX_AGE_SECONDS``. A
    transcript without a cursor here (a session this machine's hooks never saw) is left
    alone, as is the payload's own."""
    path = payload.get("transcript_path")
    own = payload.get("session_id")
    if not isinstance(path, str) or not path:
        return []
    folder = os.path.dirname(path)
    oldest = (time.time() if now is None else now) - CATCH_UP_MAX_AGE_SECONDS
    found: list[tuple[float, str, str, int]] = []
    try:
        with os.scandir(folder or ".") as entries:
            for count, entry in enumerate(entries):
                if count >= CATCH_UP_MAX_FILES:
                    break
                name = entry.name
                if not name.endswith(".jsonl") or entry.path == path:
                    continue
                session_id = name[: -len(".jsonl")]
                if session_id == own or not _is_session_id(session_id):
                    continue
                info = entry.stat()
                if stat.S_ISREG(info.st_mode) and info.st_mtime >= oldest:
                    found.append((info.st_mtime, session_id, entry.path, info.st_size))
    except OSError:
        return []
    stale: list[tuple[str, str]] = []
    for _, session_id, transcript, size in sorted(found, reverse=True):
        if len(stale) >= CATCH_UP_SESSIONS:
            break
        state = _state_read(os.path.join(state_dir, f"{session_id}.json"), loads)
        if state is None or state.get("transcript") != transcript:
            continue
        offset = state.get("offset")
        if isinstance(offset, int) and 0 <= offset < size:
            stale.append((session_id, transcript))
    return stale


def _is_session_id(session_id: str) -> bool:
    return (
        0 < len(session_id) <= 128
        and session_id[0] != "."
        and _SESSION_ID_CHARS.issuperset(session_id)
    )


def _read_events(
    path: str, offset: int, size: int, loads: Loads
) -> tuple[list[Any], int, dict[str, Any]]:
    """The events of the whole lines from ``offset`` on, where reading stopped, and what the
    lines read say of the session now (``Sync.latest``)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(min(size - offset, SYNC_MAX_BYTES))
            if data and b"\n" not in data and len(data) == SYNC_MAX_BYTES:
                return [], _skip_line(handle, offset + len(data), size), {}
    except (OSError, ValueError):
        return [], offset, {}
    scan = _Scan(loads)
    start = 0
    chars = 0
    full = False
    while True:
        if len(scan.events) >= SYNC_MAX_EVENTS or chars >= SYNC_MAX_CHARS:
            full = True
            break
        end = data.find(b"\n", start)
        if end < 0:
            break  # a line still being written: the next event reads it
        found = len(scan.events)
        scan.line(data[start:end], start)
        chars += sum(map(_chars, scan.events[found:]))
        start = end + 1
    latest = scan.latest()
    branch = _newest_branch(data, start)
    if branch:
        latest["git_branch"] = branch
    # An edit whose result is not written yet waits for the next event, which knows whether
    # it failed; so do the lines after it. (Unless nothing could be sent at all: then the
    # edit counts, as one whose result never came.)
    held = scan.held()
    if held is not None and (held[0] > 0 or not full):
        start, count = held
        del scan.events[count:]
    return [event for event in scan.events if event is not None], offset + start, latest


def _newest_branch(data: bytes, end: int) -> str:
    """The last ``"gitBranch":"<name>"`` before ``end`` whose name is a branch (not empty,
    not ``HEAD``, no quote or backslash in it); '' when none is."""
    at = data.rfind(_BRANCH_KEY, 0, end)
    while at >= 0:
        begin = at + len(_BRANCH_KEY)
        close = data.find(b'"', begin, end)
        name = data[begin:close] if close >= 0 else b""
        if name and b"\\" not in name and name != _DETACHED:
            return name.decode("utf-8", "replace")[:MAX_BRANCH_CHARS]
        at = data.rfind(_BRANCH_KEY, 0, at)
    return ""


def _chars(event: dict[str, Any] | None) -> int:
    if event is None:
        return 0
    return len(event.get("text") or event.get("summary") or event.get("file") or "")


def _skip_line(handle: BinaryIO, position: int, size: int) -> int:
    """Past the end of a line too long to read (a huge edit's content)."""
    while position < size:
        chunk = handle.read(SKIP_CHUNK_BYTES)
        if not chunk:
            break
        found = chunk.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(chunk)
    return position


def _version(value: Any) -> tuple[int, ...]:
    if not isinstance(value, str):
        return ()
    parts = []
    for part in value.split(".")[:3]:
        digits = part.split("-")[0]
        if not digits.isdigit():
            return ()
        parts.append(int(digits))
    return tuple(parts)


class _Scan:
    """The events of lines fed in file order. An edit's event is dropped when its result
    says it failed or was rejected; until its result is seen it is pending."""

    def __init__(self, loads: Loads) -> None:
        self.loads = loads
        self.events: list[Any] = []  # None where a failed edit's event was
        self.starts: list[int] = []  # where the line of each event starts
        # Edit calls without a result yet: the mark of the result's id -> (tool id, event
        # index, where its line starts, its response's message id).
        self.pending: dict[bytes, tuple[str, int, int, str]] = {}
        # The main agent's newest text and its line's time, unclipped; none once a
        # compaction follows it.
        self.said: tuple[str, str] | None = None

    def latest(self) -> dict[str, Any]:
        """The main agent's newest text, as ``Sync.latest`` holds it."""
        if self.said is None:
            return {}
        text, at = self.said
        return {"last_assistant_message": {"text": message_text(text), "at": at}}

    def held(self) -> tuple[int, int] | None:
        """Where the first line of a pending edit starts and how many events came before it."""
        if not self.pending:
            return None
        start = min(item[2] for item in self.pending.values())
        count = next(n for n, at in enumerate(self.starts) if at >= start)
        return start, count

    def line(self, line: bytes, start: int) -> None:
        if is_tool_result(line):
            said = user_said(line)
            named = bool(self.pending) and any(mark in line for mark in self.pending)
            if named and not said and ERROR_MARK not in line:
                for mark in [mark for mark in self.pending if mark in line]:
                    del self.pending[mark]
                return
            if not named and not said:
                return
            record = self._parse(line)
            if record is None:
                return
            if named:
                self._results(record)
            if said and record.get("isSidechain") is not True:
                self._said(record)
                self.starts += [start] * (len(self.events) - len(self.starts))
            return
        if not any(mark in line for mark in _MARKS):
            if _BOUNDARY_MARK in line:
                self.said = None  # what the agent said before a compaction is not its latest
            return
        record = self._parse(line)
        if record is None or record.get("isSidechain") is True:
            return
        message = record.get("message")
        if not isinstance(message, dict):
            return
        at = record.get("timestamp")
        at = at if isinstance(at, str) else ""
        if record.get("type") == "assistant":
            message_id = message.get("id")
            message_id = message_id if isinstance(message_id, str) else ""
            if any(item[3] != message_id or not message_id for item in self.pending.values()):
                self.pending.clear()  # a new response: the calls before it got no result
            content = message.get("content")
            self._edits(content, at, start, message_id)
            if message.get("model") != SYNTHETIC_MODEL:  # an API error's, not the agent's
                self._text(content, at)
        elif record.get("type") == "user":
            content = message.get("content")
            if isinstance(content, list) and any(
                isinstance(block, dict) and block.get("type") == "tool_result" for block in content
            ):
                self._results(record)
                return
            if record.get("isMeta") is not True:  # a hook's or a skill's text is not a turn
                self.pending.clear()  # a person's turn: the calls before it got no result
            _user(record, content, at, self.events)
            self.starts += [start] * (len(self.events) - len(self.starts))

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            record = self.loads(line)
        except (ValueError, RecursionError):
            return None
        return record if isinstance(record, dict) else None

    def _results(self, record: dict[str, Any]) -> None:
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            if not isinstance(tool_id, str):
                continue
            item = self.pending.pop(result_mark(tool_id), None)
            if item is not None and block.get("is_error") is True:
                self.events[item[1]] = None  # failed, or the user said no

    def _said(self, record: dict[str, Any]) -> None:
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return
        at = record.get("timestamp")
        at = at if isinstance(at, str) else ""
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            if not isinstance(tool_id, str) or not tool_id:
                continue
            text = rejection_text(block)
            if text:
                self.events.append(
                    {"type": "prompt", "id": tool_id, "text": text[:PROMPT_CHARS], "at": at}
                )
            for decision in answer_decisions(block, record.get("toolUseResult")):
                self.events.append({"type": "decision", "id": tool_id, "text": decision, "at": at})

    def _text(self, content: Any, at: str) -> None:
        if isinstance(content, str):
            if content.strip():
                self.said = (content, at)
            return
        if not isinstance(content, list):
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and text.strip():
                    self.said = (text, at)

    def _edits(self, content: Any, at: str, start: int, message_id: str) -> None:
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            name, tool_id, tool_input = block.get("name"), block.get("id"), block.get("input")
            if name not in EDIT_TOOLS or not isinstance(tool_id, str):
                continue
            if not isinstance(tool_input, dict):
                continue
            path = tool_input.get(EDIT_TOOLS[name])
            if isinstance(path, str) and path and len(path) <= MAX_PATH_CHARS:
                self.pending[result_mark(tool_id)] = (tool_id, len(self.events), start, message_id)
                self.events.append(
                    {"type": "edit", "id": tool_id, "tool": name, "file": path, "at": at}
                )
                self.starts.append(start)


def _user(record: dict[str, Any], content: Any, at: str, events: list[Any]) -> None:
    prompt_id = record.get("promptId")
    if not isinstance(prompt_id, str) or not prompt_id:
        return
    if record.get("isCompactSummary") is True:
        summary = summary_text(_text_of(content))
        if summary:
            events.append({"type": "compaction", "id": prompt_id, "summary": summary, "at": at})
        return
    if (
        record.get("isMeta") is True
        or record.get("isVisibleInTranscriptOnly") is True
        or _version(record.get("version")) < PROMPT_ID_VERSION
    ):
        return
    text = typed_text(content, PROMPT_CHARS)
    if text:
        events.append({"type": "prompt", "id": prompt_id, "text": text[:PROMPT_CHARS], "at": at})


def _state_read(state_path: str, loads: Loads) -> dict[str, Any] | None:
    try:
        with open(state_path, "rb") as handle:
            state = loads(handle.read(4096))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _state_write(state_path: str, data: bytes) -> None:
    directory = os.path.dirname(state_path)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    # Temp file + rename: a hook reading the cursor never sees half of one.
    temp = f"{state_path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temp, state_path)


def _prune(state_dir: str) -> None:
    """Delete the cursors of sessions untouched for ``STATE_MAX_AGE_SECONDS``."""
    oldest = time.time() - STATE_MAX_AGE_SECONDS
    try:
        with os.scandir(state_dir) as entries:
            for entry in entries:
                if entry.name.endswith(".json") and entry.stat().st_mtime < oldest:
                    os.unlink(entry.path)
    except OSError:
        pass
