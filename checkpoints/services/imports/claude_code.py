"""Importing Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each transcript becomes a session (harness ``claude-code``, key: the transcript's session
id) with a ``pre_compaction`` checkpoint at each ``compact_boundary`` line (the facts of the
lines before it, the compaction summary that follows it when the transcript holds one) and a
``session_end`` checkpoint at its end. The facts come from the client's own stdlib reader
(``hooks.transcripts.claude_code.parse_lines``), so an import sees what PreCompact sends.
Subagent transcripts (``subagents/`` folders) belong to their session and are not imported.
"""

from __future__ import annotations

import json
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
from hooks.transcripts.claude_code import TranscriptFacts, parse_lines
from hooks.transcripts.prompts import prompt_text

HARNESS = Harness.CLAUDE_CODE.value
# User lines the harness wrote, not the person.
_NOT_TYPED = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")


def claude_code_paths(*, path: Path) -> list[Path]:
    """The transcripts under ``path``: the file itself, a project folder's ``*.jsonl``, or
    every project folder's in a ``~/.claude/projects`` folder; sorted, subagents left out."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = [*path.glob("*.jsonl"), *path.glob("*/*.jsonl")]
    return sorted(p for p in found if p.is_file() and "subagents" not in p.parts[-3:])


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
    return ""


def _is_prompt(record: dict[str, Any]) -> bool:
    """A line a person typed in the main chain (the reader's own rule for prompts)."""
    if record.get("type") != "user" or record.get("isSidechain", False) is not False:
        return False
    if any(record.get(flag) is True for flag in _NOT_TYPED):
        return False
    message = record.get("message")
    text = _text(message.get("content")).strip() if isinstance(message, dict) else ""
    return bool(prompt_text(text))


def _content(facts: TranscriptFacts, context_tokens: int | None) -> CheckpointContent:
    return CheckpointContent(
        current_task=facts.current_task,
        next_steps=[todo.content for todo in facts.todos if todo.status == "pending"],
        modified_files=list(facts.modified_files),
        recent_prompts=list(facts.recent_prompts),
        last_assistant_message=facts.last_assistant_message,
        git_branch=facts.git_branch,
        context_tokens=context_tokens if context_tokens is not None else facts.context_tokens,
    )


def claude_code_read(*, path: Path, data: bytes) -> tuple[ImportedSession | None, int]:
    """The session ``data`` (a transcript's bytes, read from ``path``) describes, and the
    number of malformed lines skipped. None when no line holds a conversation."""
    lines: list[bytes] = []
    malformed = 0
    session_id = cwd = ""
    times: list[datetime] = []
    boundaries: list[tuple[int, dict[str, Any]]] = []  # (index in ``lines``, record)
    summaries: dict[int, str] = {}  # boundary ordinal -> its compaction summary
    prompts_before: list[int] = []
    prompts = 0
    conversation = False
    for raw in data.splitlines():
        if not raw.strip():
            continue
        record = _decode(raw)
        if record is None:
            malformed += 1
            continue
        moment = timestamp_parse(record.get("timestamp"))
        if moment is not None:
            times.append(moment)
        if record.get("type") in ("user", "assistant"):
            conversation = True
            session_id = session_id or str(record.get("sessionId") or "")
            cwd = cwd or str(record.get("cwd") or "")
        if record.get("type") == "system" and record.get("subtype") == "compact_boundary":
            boundaries.append((len(lines), record))
            prompts_before.append(prompts)
        elif record.get("isCompactSummary") is True and boundaries:
            message = record.get("message")
            if isinstance(message, dict):
                summaries.setdefault(len(boundaries) - 1, _text(message.get("content")).strip())
        elif _is_prompt(record):
            prompts += 1
        lines.append(raw)
    if not conversation:
        return None, malformed
    key = session_id if session_id and not identifier_problem(session_id) else path.stem
    if identifier_problem(key):
        return None, malformed
    started = min(times) if times else timezone.now()
    ended = max(times) if times else started
    imported = ImportedSession(
        harness=HARNESS,
        session_key=key,
        cwd=cwd,
        started_at=started,
        last_activity_at=ended,
        transcript_path=str(path),
    )
    for ordinal, (index, record) in enumerate(boundaries):
        facts = parse_lines(lines[:index])
        metadata = record.get("compactMetadata")
        pre_tokens = metadata.get("preTokens") if isinstance(metadata, dict) else None
        imported.points.append(
            ImportedPoint(
                mark=f"import:{HARNESS}:compact:{ordinal + 1}",
                trigger=Trigger.PRE_COMPACTION,
                at=timestamp_parse(record.get("timestamp")) or ended,
                content=_content(
                    facts, pre_tokens if isinstance(pre_tokens, int) and pre_tokens >= 0 else None
                ),
                prompt_count=prompts_before[ordinal],
                compactions=ordinal,
                model=facts.model,
                summary=summaries.get(ordinal, ""),
            )
        )
    facts = parse_lines(lines)
    imported.model = facts.model
    imported.points.append(
        ImportedPoint(
            mark=f"import:{HARNESS}:end:{len(lines)}",
            trigger=Trigger.SESSION_END,
            at=ended,
            content=_content(facts, None),
            prompt_count=prompts,
            compactions=len(boundaries),
            model=facts.model,
        )
    )
    return imported, malformed


def claude_code_import(*, owner: User, path: Path) -> ImportReport:
    """Import one Claude Code transcript file into ``owner``'s account; what it did.
    A file that cannot be read or holds no conversation is reported, never fatal."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return ImportReport(files=1, problems=[f"{path}: {exc.strerror or exc}"])
    imported, malformed = claude_code_read(path=path, data=data)
    if imported is None:
        report = ImportReport(files=1, sessions_skipped=1)
        report.problems.append(f"{path}: no conversation")
    else:
        report = imported_session_write(owner=owner, imported=imported)
    report.malformed_lines += malformed
    return report
