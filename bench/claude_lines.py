"""Claude Code transcript lines, as the replay reads them (``bench/claude_replay.py``): what
a person typed, what the harness wrote, when a turn starts, the times, the naive baseline's
text."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

HARNESS_PREFIXES = (
    "<task-notification>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "Caveat:",
    "[Request interrupted",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<user-memory-input>",
    "Unknown slash command:",
    "This session is being continued from a previous conversation",
)
# Blocks Claude Code adds to the typed text's line (IDE state, reminders): not typed.
ADDED_BLOCK_PREFIXES = ("<ide_opened_file>", "<ide_selection>", "<system-reminder>")
COMMAND = re.compile(r"<command-name>\s*/?(?P<name>[^<]*?)\s*</command-name>")
COMMAND_ARGS = re.compile(r"<command-args>(?P<args>.*?)</command-args>", re.S)
SYNTHETIC_MODEL = "<synthetic>"
SUMMARY_PREAMBLE = "The summary below covers the earlier portion of the conversation."
SUMMARY_TRAILER = "\n\nIf you need specific details from before compaction"


def version_of(text: Any) -> tuple[int, ...]:
    if not isinstance(text, str):
        return ()
    parts = []
    for part in text.split(".")[:3]:
        digits = part.split("-")[0]
        if not digits.isdigit():
            return ()
        parts.append(int(digits))
    return tuple(parts)


def text_blocks(content: Any) -> list[str]:
    """A user line's text: the string, or its text blocks."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]


def tool_results(record: dict[str, Any]) -> list[dict[str, Any]]:
    content = (record.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def is_main(record: dict[str, Any]) -> bool:
    return record.get("isSidechain") is not True


def typed_prompt(record: dict[str, Any]) -> str | None:
    """What a person typed on this line, or None when it is not such a line. A slash
    command comes back as ``/name args`` (``local_command`` decides whether it counts)."""
    if record.get("type") != "user" or not is_main(record):
        return None
    if record.get("isMeta") or record.get("isCompactSummary"):
        return None
    if record.get("isVisibleInTranscriptOnly"):
        return None
    if tool_results(record):
        return None
    blocks = [
        text.strip()
        for text in text_blocks((record.get("message") or {}).get("content"))
        if text.strip() and not text.lstrip().startswith(ADDED_BLOCK_PREFIXES)
    ]
    text = "\n".join(blocks).strip()
    if not text:
        return None
    command = COMMAND.search(text)
    if command is not None and text.startswith(("<command-name>", "<command-message>")):
        found = COMMAND_ARGS.search(text)
        args = found.group("args").strip() if found else ""
        return f"/{command.group('name')} {args}".strip()
    if text.startswith(HARNESS_PREFIXES):
        return None
    return text


def answered_locally(records: list[dict[str, Any] | None], index: int) -> bool:
    """Whether the slash command at ``index`` was answered by the harness itself: a
    ``<local-command-stdout>`` line (or a compaction) comes before any response or prompt."""
    for record in records[index + 1 : index + 8]:
        if record is None:
            continue
        if record.get("type") == "system" and record.get("subtype") == "compact_boundary":
            return True
        if record.get("type") == "assistant":
            return False
        if record.get("type") == "user":
            texts = text_blocks((record.get("message") or {}).get("content"))
            joined = "".join(texts).lstrip()
            if joined.startswith(("<local-command-stdout>", "<local-command-stderr>")):
                return True
            if typed_prompt(record) is not None:
                return False
    return False


def prompt_of(records: list[dict[str, Any] | None], index: int) -> str | None:
    """The prompt Claude Code's UserPromptSubmit carries for line ``index``, or None."""
    record = records[index]
    if record is None:
        return None
    prompt = typed_prompt(record)
    if prompt is None:
        return None
    typed = "".join(text_blocks((record.get("message") or {}).get("content")))
    if not prompt.startswith("/") or not COMMAND.search(typed):
        return prompt
    if prompt.split()[0] in ("/compact", "/clear") or answered_locally(records, index):
        return None  # the harness's own: a compaction, a new session, a local answer
    return prompt


def summary_of(record: dict[str, Any]) -> str:
    """A compaction summary line's summary, as PostCompact's ``compact_summary`` holds it:
    without the words Claude Code writes around it in the transcript."""
    text = "\n".join(text_blocks((record.get("message") or {}).get("content")))
    text = text.partition(SUMMARY_PREAMBLE)[2] or text
    return text.partition(SUMMARY_TRAILER)[0].strip()


def starts_turn(record: dict[str, Any]) -> bool:
    """A background task's notice: the agent takes a turn on it, with no prompt."""
    if record.get("type") != "user" or not is_main(record) or tool_results(record):
        return False
    texts = text_blocks((record.get("message") or {}).get("content"))
    return "".join(texts).lstrip().startswith("<task-notification>")


def turn_ended(following: list[str]) -> bool:
    """Whether the turn under way at the cut had ended, from the lines after it: the next
    conversation line starts a turn (a prompt, a notice), or there is none."""
    records: list[dict[str, Any] | None] = []
    for line in following:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        records.append(record if isinstance(record, dict) else None)
    for index, record in enumerate(records):
        if record is None or record.get("type") not in ("user", "assistant"):
            continue
        if not is_main(record) or record.get("isMeta"):
            continue
        return prompt_of(records, index) is not None or starts_turn(record)
    return True


def slug_of(cwd: str) -> str:
    """Claude Code's folder name for a project: every character but letters and digits as -."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def conversation_of(record: dict[str, Any]) -> list[str]:
    """A main-chain response as the naive baseline reads it: its texts and tool calls."""
    message = record.get("message")
    if not is_main(record) or not isinstance(message, dict):
        return []
    if message.get("model") == SYNTHETIC_MODEL:
        return []
    content = message.get("content")
    found = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and str(block.get("text", "")).strip():
            found.append(f"Assistant: {str(block['text']).strip()}")
        elif block.get("type") == "tool_use":
            inputs = json.dumps(block.get("input"), ensure_ascii=False)
            found.append(f"Tool {block.get('name')}: {inputs}")
    return found


def stamp_of(record: dict[str, Any]) -> datetime | None:
    """A transcript line's time, or None."""
    stamp = record.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
