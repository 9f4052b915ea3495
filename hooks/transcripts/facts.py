"""What the readers of other harnesses' transcripts collect (``codex.py``, ``gemini.py``), and
the ``signet.transcript`` payload they make of it: the shape ``claude_code.py``'s
``TranscriptFacts.as_payload()`` sends, which the server reads (``transcript_parse``).

The readers run in the hook client at the harness's pre-compaction event, so this module
imports only what the interpreter has loaded already. Nothing here raises for bad content.
"""

from __future__ import annotations

from .prompts import goal_worthy, strip_ansi
from .tasks import clip, current_task

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_PROMPTS = 10
PROMPT_CHARS = 500
MESSAGE_CHARS = 2000
SUMMARY_CHARS = 8000
MAX_MODIFIED_FILES = 50
MAX_TODOS = 100
MAX_PATH_CHARS = 4096


class Prompts:
    """The prompts of one source, in order (as many as the bytes read hold): the last
    ``MAX_PROMPTS`` (each clipped), the latest one and the first substantive one."""

    __slots__ = ("seen", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.seen = False  # the source spoke at all, even if only with harness text

    def add(self, text: str) -> None:
        text = strip_ansi(text).strip()
        if text:
            self.texts.append(text)

    def drop(self, count: int) -> None:
        """Take back the last ``count`` prompts (turns the harness rolled back)."""
        if count > 0:
            del self.texts[max(0, len(self.texts) - count) :]

    @property
    def recent(self) -> list[str]:
        return [clip(text, PROMPT_CHARS) for text in self.texts[-MAX_PROMPTS:]]

    @property
    def last(self) -> str:
        return clip(self.texts[-1], MESSAGE_CHARS) if self.texts else ""

    @property
    def first(self) -> str:
        for text in self.texts:
            if goal_worthy(text):
                return clip(text, MESSAGE_CHARS)
        return ""


class Facts:
    """Running state over a transcript: only the facts, never the records."""

    def __init__(self) -> None:
        self.prompts = Prompts()
        # (content, status) of the harness's own plan/to-do tool, as last written.
        self.todos: list[tuple[str, str]] = []
        # Insertion-ordered: re-touching a file moves it to the end. The value names the
        # call that touched it last, so that a call found to have failed can be taken back.
        self.modified: dict[str, str] = {}
        self.last_assistant_message = ""
        self.git_branch = ""
        self.model = ""
        self.context_tokens: int | None = None
        self.compactions = 0
        self.compact_summary = ""

    def set_todos(self, items: object, content_key: str) -> None:
        """The to-do list from a tool's argument: a list of objects with ``content_key`` and
        ``status`` strings; anything else in it is skipped, a non-list leaves it as it was."""
        if not isinstance(items, list):
            return
        todos = []
        for item in items[:MAX_TODOS]:
            if not isinstance(item, dict):
                continue
            content, status = item.get(content_key), item.get("status")
            if isinstance(content, str) and content.strip() and isinstance(status, str):
                todos.append((clip(content, PROMPT_CHARS), status))
        self.todos = todos

    def touch(self, path: object, call: str) -> None:
        if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH_CHARS:
            return
        path = path.strip()
        self.modified.pop(path, None)
        self.modified[path] = call
        if len(self.modified) > MAX_MODIFIED_FILES:
            del self.modified[next(iter(self.modified))]

    def untouch(self, call: str) -> None:
        """Forget the files whose last change was ``call``: it did not change them."""
        if not call:
            return
        for path in [path for path, by in self.modified.items() if by == call]:
            del self.modified[path]

    def assistant(self, text: str) -> None:
        if text.strip():
            self.last_assistant_message = clip(text, MESSAGE_CHARS)

    def compacted(self, summary: str) -> None:
        self.compactions += 1
        self.context_tokens = None  # the context was rebuilt; the next response says its size
        if summary.strip():
            self.compact_summary = clip(summary, SUMMARY_CHARS)

    def payload(self, *, truncated: bool, prompts: Prompts | None = None) -> dict[str, Any]:
        """``signet.transcript``. ``prompts``: the source of prompts to report (the
        collector's own by default). The goal is the first substantive prompt, and only
        when the whole file was read (``truncated`` False): a tail's first prompt is not
        the session's."""
        said = self.prompts if prompts is None else prompts
        todos = [(content, status, "", "") for content, status in self.todos]
        return {
            "current_task": current_task(todos) or said.last,
            "todos": [
                {"content": content, "status": status, "active_form": "", "description": ""}
                for content, status in self.todos
            ],
            "last_user_request": said.last,
            "recent_prompts": list(said.recent),
            "modified_files": list(self.modified),
            "last_assistant_message": self.last_assistant_message,
            "git_branch": self.git_branch,
            "model": self.model,
            "context_tokens": self.context_tokens,
            "compactions": self.compactions,
            "truncated": truncated,
            "goal": "" if truncated else said.first,
            "compact_summary": self.compact_summary,
        }


def decode(raw: str | bytes, loads: Any) -> dict[str, Any] | None:
    """One JSON object from a line, or None (not an object, bad JSON, bad UTF-8)."""
    line = raw.strip()
    is_object = line.startswith(b"{") if isinstance(line, bytes) else line.startswith("{")
    if not is_object:
        return None
    try:
        record = loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def starts_with_any(text: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``text``, its leading blanks aside, starts with one of ``prefixes`` (ASCII
    case ignored, as the harnesses compare their markers)."""
    head = text.lstrip()[:64].lower()
    return any(head.startswith(prefix) for prefix in prefixes)
