"""What every harness adapter produces and consumes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


def clean_text(value: str) -> str:
    """Drop NULs and lone surrogates: valid JSON can carry both, no database column can."""
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


class EventKind(enum.StrEnum):
    SESSION_START = "session_start"
    PROMPT = "prompt"
    TOOL_USE = "tool_use"
    REMEMBER = "remember"
    PRE_COMPACT = "pre_compact"
    POST_COMPACT = "post_compact"
    STOP = "stop"
    SESSION_END = "session_end"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Event:
    """One hook event, normalised. Strings are raw here; the engine redacts before storing."""

    kind: EventKind
    harness: str
    session_key: str
    name: str = ""  # the harness's own event name, for logs and unknown-event counts
    cwd: str = ""
    # What the client computed where the files are (they win over the server's guesses).
    client_project: str = ""
    client_git_root: str = ""
    git_branch: str = ""
    git_head: str = ""
    source: str = ""  # session-start source, session-end reason, or compaction trigger
    prompt: str = ""
    remember: str = ""
    files: tuple[str, ...] = ()
    transcript_path: str = ""
    model: str = ""
    compact_summary: str = ""
    last_assistant_message: str = ""
    previous_session_key: str = ""
    # When a client's outbox held the event: set only on a replay, which may come hours late.
    queued_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What the engine decided: the context to inject (already budgeted and redacted)."""

    context: str = ""
    duplicate: bool = False


class PayloadError(ValueError):
    """The payload cannot be understood; the message says why (it goes back to the client)."""


class HarnessAdapter(Protocol):
    harness: str

    def parse(self, payload: dict[str, Any]) -> Event:
        """Normalise a raw payload; raise ``PayloadError`` with a reason when it is unusable."""
        ...

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        """The body the harness expects back for ``event``."""
        ...
