"""What every harness adapter produces and consumes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from checkpoints.services.redaction import contains_secret


def clean_text(value: str) -> str:
    """Drop NULs and lone surrogates: valid JSON can carry both, no database column can."""
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


# Identifiers are stored and addressed as sent (``/api/sessions/<key>/``), so they cannot be
# redacted: they are held to a character set that is safe in a URL path segment.
IDENTIFIER_MAX_CHARS = 255
_IDENTIFIER_PUNCTUATION = frozenset("._:@+=~-")
IDENTIFIER_RULE = (
    f"1 to {IDENTIFIER_MAX_CHARS} characters: letters, digits and . _ : @ + = ~ -, "
    "starting with a letter or digit"
)


def identifier_problem(value: str) -> str:
    """Why ``value`` cannot be a session key ('' when it can): its characters, or a secret.

    Letters and digits of any script pass; no slash, space, percent, quote or control
    character does, so every key names one path segment and prints as itself.
    """
    if not value or len(value) > IDENTIFIER_MAX_CHARS or not value[0].isalnum():
        return f"must be {IDENTIFIER_RULE}."
    if not all(char.isalnum() or char in _IDENTIFIER_PUNCTUATION for char in value):
        return f"must be {IDENTIFIER_RULE}."
    if contains_secret(value):
        return "looks like a credential; a session key is stored and shown as is."
    return ""


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
class TranscriptExtract:
    """What the hook client read from the tail of the agent's transcript (PreCompact).

    The client reads it where the file is; the server only checks the shape and the bounds.
    ``todos`` holds ``(content, status)`` pairs. Texts are raw here, as in ``Event``.
    """

    current_task: str = ""
    todos: tuple[tuple[str, str], ...] = ()
    recent_prompts: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    last_assistant_message: str = ""
    git_branch: str = ""
    context_tokens: int | None = None


@dataclass(frozen=True)
class ContextUsage:
    """How full the agent's context is, as its client reported it (``signet.usage``).

    ``model`` names the model the tokens were counted for ('' when the client did not say);
    the server picks the context window from it. Raw here, as in ``Event``.
    """

    context_tokens: int
    model: str = ""


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
    transcript: TranscriptExtract | None = None
    usage: ContextUsage | None = None
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
