"""Importing OpenClaw sessions: an agent's ``sessions.json`` store and its pi-format JSONL
transcripts (``<sessionId>.jsonl``, header ``{"type":"session","version":3,…}``).

Each transcript becomes a session (harness ``openclaw``, key: its ``sessionId``; the store's
``sessionKey`` slot such as ``agent:main:main`` is kept as an ``openclaw:<key>`` tag) with a
``pre_compaction`` checkpoint at each ``compaction`` entry (its summary, the files it says
were modified, its ``tokensBefore``) and a ``session_end`` checkpoint from the tail. The
store's entry accepts both shapes of the memory-flush bookkeeping: the documented flat
``memoryFlushAt``/``memoryFlushCompactionCount`` and the newer nested ``memoryFlush``; it is
kept in the final checkpoint's ``state``.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from checkpoints.harnesses.base import identifier_problem
from checkpoints.models import Harness, Trigger
from checkpoints.services.imports import ImportReport, timestamp_parse
from checkpoints.services.imports.transcripts import (
    ImportedPoint,
    ImportedSession,
    imported_session_write,
)
from checkpoints.services.store import CheckpointContent

HARNESS = Harness.OPENCLAW.value
STORE_NAME = "sessions.json"
MAX_PROMPTS = 10
PROMPT_CHARS = 500
MESSAGE_CHARS = 2000
MAX_FILES = 50
# Tool name -> the argument naming the file it changes (OpenClaw's tools).
EDIT_TOOLS = {"write": "path", "edit": "path"}
# OpenClaw's silent pre-compaction turn: its prompt and reply are bookkeeping, not work.
MEMORY_FLUSH_PROMPT = "Pre-compaction memory flush"
SILENT_REPLY = "NO_REPLY"


@dataclass(frozen=True)
class OpenClawEntry:
    """One ``sessions.json`` entry, both memory-flush shapes read into the same fields."""

    session_key: str
    session_id: str
    session_file: str = ""
    started_at: datetime | None = None
    last_activity_at: datetime | None = None
    compaction_count: int = 0
    memory_flush_at: datetime | None = None
    memory_flush_compaction_count: int | None = None

    def as_state(self) -> dict[str, Any]:
        """The entry's bookkeeping as JSON values (kept in the final checkpoint's state)."""
        return {
            "openclaw": {
                "session_key": self.session_key,
                "compaction_count": self.compaction_count,
                "memory_flush_at": self.memory_flush_at.isoformat()
                if self.memory_flush_at
                else None,
                "memory_flush_compaction_count": self.memory_flush_compaction_count,
            }
        }


@dataclass(frozen=True)
class OpenClawSource:
    """A transcript to import, with its store entry when there is one."""

    transcript: Path
    entry: OpenClawEntry | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def openclaw_entry_parse(*, session_key: str, data: object) -> OpenClawEntry | None:
    """A store entry, flat or nested ``memoryFlush`` shape; None when it names no session."""
    if not isinstance(data, dict):
        return None
    session_id = data.get("sessionId")
    if not isinstance(session_id, str) or identifier_problem(session_id):
        return None
    nested = data.get("memoryFlush")
    flush_at: object = data.get("memoryFlushAt")
    flush_count: object = data.get("memoryFlushCompactionCount")
    if isinstance(nested, dict):
        flush_at = nested.get("at", nested.get("flushedAt", flush_at))
        flush_count = nested.get("compactionCount", flush_count)
    session_file = data.get("sessionFile")
    return OpenClawEntry(
        session_key=session_key,
        session_id=session_id,
        session_file=session_file if isinstance(session_file, str) else "",
        started_at=timestamp_parse(data.get("sessionStartedAt")),
        last_activity_at=timestamp_parse(data.get("lastInteractionAt") or data.get("updatedAt")),
        compaction_count=max(0, _int(data.get("compactionCount")) or 0),
        memory_flush_at=timestamp_parse(flush_at),
        memory_flush_compaction_count=_int(flush_count),
    )


def _transcript_of(folder: Path, entry: OpenClawEntry) -> Path:
    if entry.session_file:
        named = Path(entry.session_file)
        if named.is_absolute() and named.is_file():
            return named
        beside = folder / named.name
        if beside.is_file():
            return beside
    return folder / f"{entry.session_id}.jsonl"


def openclaw_sources(*, path: Path) -> tuple[list[OpenClawSource], list[str]]:
    """What ``path`` holds to import: a ``sessions.json`` (or a folder holding one) gives its
    entries' transcripts, found beside it; a lone ``.jsonl`` is imported without an entry.
    Also the problems met (an unreadable store, a missing transcript)."""
    if path.is_file() and path.suffix == ".jsonl":
        return [OpenClawSource(transcript=path)], []
    store = path / STORE_NAME if path.is_dir() else path
    try:
        data = json.loads(store.read_bytes())
    except (OSError, ValueError) as exc:
        return [], [f"{store}: cannot read the session store ({exc})"]
    if not isinstance(data, dict):
        return [], [f"{store}: not a session store (expected an object)"]
    sources, problems = [], []
    for session_key, raw in data.items():
        entry = openclaw_entry_parse(session_key=str(session_key), data=raw)
        if entry is None:
            problems.append(f"{store}: entry {session_key!r} names no valid sessionId")
            continue
        transcript = _transcript_of(store.parent, entry)
        if not transcript.is_file():
            problems.append(f"{session_key}: transcript {transcript.name} not found")
            continue
        sources.append(OpenClawSource(transcript=transcript, entry=entry))
    return sources, problems


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class _PiReader:
    """Running facts over a pi transcript's entries (the last request, files, usage)."""

    def __init__(self) -> None:
        self.prompts: deque[str] = deque(maxlen=MAX_PROMPTS)
        self.prompt_count = 0
        self.last_request = ""
        self.last_message = ""
        self.modified: dict[str, None] = {}
        self.model = ""
        self.context_tokens: int | None = None
        self.compactions = 0

    def touch(self, path: str) -> None:
        self.modified.pop(path, None)
        self.modified[path] = None
        if len(self.modified) > MAX_FILES:
            del self.modified[next(iter(self.modified))]

    def message(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        if role == "user":
            text = _text(message.get("content")).strip()
            if text and not text.startswith(MEMORY_FLUSH_PROMPT):
                self.prompt_count += 1
                self.last_request = _clip(text, MESSAGE_CHARS)
                self.prompts.append(_clip(text, PROMPT_CHARS))
        elif role == "assistant":
            self._assistant(message)

    def _assistant(self, message: dict[str, Any]) -> None:
        model = message.get("model")
        if isinstance(model, str) and model:
            self.model = model
        usage = message.get("usage")
        if isinstance(usage, dict):
            parts = [_int(usage.get(name)) for name in ("input", "cacheRead", "cacheWrite")]
            if all(part is not None for part in parts):
                self.context_tokens = sum(part or 0 for part in parts)
        content = message.get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text = block["text"].strip()
                if text and text != SILENT_REPLY:
                    self.last_message = _clip(text, MESSAGE_CHARS)
            elif block.get("type") == "toolCall" and block.get("name") in EDIT_TOOLS:
                arguments = block.get("arguments")
                target = (
                    arguments.get(EDIT_TOOLS[block["name"]])
                    if isinstance(arguments, dict)
                    else None
                )
                if isinstance(target, str) and target:
                    self.touch(target)

    def content(self, *, context_tokens: int | None = None) -> CheckpointContent:
        return CheckpointContent(
            current_task=self.last_request,
            modified_files=list(self.modified),
            recent_prompts=list(self.prompts),
            last_assistant_message=self.last_message,
            context_tokens=context_tokens if context_tokens is not None else self.context_tokens,
        )


def openclaw_read(*, source: OpenClawSource, data: bytes) -> tuple[ImportedSession | None, int]:
    """The session a pi transcript's bytes describe, and the number of malformed lines."""
    reader = _PiReader()
    malformed = lines = 0
    header: dict[str, Any] = {}
    times: list[datetime] = []
    points: list[ImportedPoint] = []
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            malformed += 1
            continue
        lines += 1
        moment = timestamp_parse(record.get("timestamp"))
        if moment is not None:
            times.append(moment)
        kind = record.get("type")
        if kind == "session" and not header:
            header = record
        elif kind == "message" and isinstance(record.get("message"), dict):
            reader.message(record["message"])
        elif kind == "model_change" and isinstance(record.get("modelId"), str):
            reader.model = record["modelId"]
        elif kind == "compaction":
            details = record.get("details")
            files = details.get("modifiedFiles") if isinstance(details, dict) else None
            for path in files if isinstance(files, list) else []:
                if isinstance(path, str) and path:
                    reader.touch(path)
            before = _int(record.get("tokensBefore"))
            summary = record.get("summary")
            points.append(
                ImportedPoint(
                    mark=f"import:{HARNESS}:compact:{reader.compactions + 1}",
                    trigger=Trigger.PRE_COMPACTION,
                    at=moment or timezone.now(),
                    content=reader.content(context_tokens=before),
                    prompt_count=reader.prompt_count,
                    compactions=reader.compactions,
                    model=reader.model,
                    summary=summary if isinstance(summary, str) else "",
                )
            )
            reader.compactions += 1
            reader.context_tokens = None  # unknown until the next response
    entry = source.entry
    session_id = header.get("id") if isinstance(header.get("id"), str) else ""
    key = entry.session_id if entry else session_id or source.transcript.stem
    if identifier_problem(key) or lines == 0 or (not reader.prompt_count and not points):
        return None, malformed
    started = (entry.started_at if entry else None) or (min(times) if times else timezone.now())
    ended = max(
        [*times, started] + ([entry.last_activity_at] if entry and entry.last_activity_at else [])
    )
    cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else ""
    end_content = reader.content()
    if entry is not None:
        end_content.state = entry.as_state()
    points.append(
        ImportedPoint(
            mark=f"import:{HARNESS}:end:{lines}",
            trigger=Trigger.SESSION_END,
            at=ended,
            content=end_content,
            prompt_count=reader.prompt_count,
            compactions=max(reader.compactions, entry.compaction_count if entry else 0),
            model=reader.model,
        )
    )
    return (
        ImportedSession(
            harness=HARNESS,
            session_key=key,
            cwd=str(cwd),
            started_at=started,
            last_activity_at=ended,
            points=points,
            transcript_path=str(source.transcript),
            model=reader.model,
            extra_tags=[f"openclaw:{entry.session_key}"] if entry else [],
        ),
        malformed,
    )


def openclaw_import(*, owner: User, source: OpenClawSource) -> ImportReport:
    """Import one OpenClaw transcript (with its store entry) into ``owner``'s account."""
    try:
        data = source.transcript.read_bytes()
    except OSError as exc:
        return ImportReport(files=1, problems=[f"{source.transcript}: {exc.strerror or exc}"])
    imported, malformed = openclaw_read(source=source, data=data)
    if imported is None:
        report = ImportReport(files=1, sessions_skipped=1)
        report.problems.append(f"{source.transcript}: no conversation")
    else:
        report = imported_session_write(owner=owner, imported=imported)
    report.malformed_lines += malformed
    return report
