"""What every harness adapter produces and consumes, and the payload helpers they share.

An adapter is one file: it names its harness (the URL slug), its injection cap, whether the
event comes in the body or the URL, and turns its payloads into ``Event`` and the engine's
``Outcome`` into its native reply. The engine knows no harness. The helpers here read the
fields every harness has in some form: bounded texts, session keys, and the ``signet``
object the hook clients add (project, git, lineage, outbox time, usage, transcript facts).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone

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
    # Nothing happened: the event only carries what its client found in the transcript.
    SYNC = "sync"
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
    # The session's opening substantive request, when the client's read reached the start of
    # the transcript, else '' (the server keeps its own record of the prompts).
    goal: str = ""
    # The harness's latest compaction summary in the transcript (Claude Code writes it as a
    # user line): its request, pending tasks and next step outlive the conversation.
    compact_summary: str = ""
    # What the user decided, newest last: their answers to the agent's questions.
    decisions: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentTasks:
    """The agent's own task list as its client read it (``signet.tasks``: Claude Code's task
    files, at Stop): the task in progress and ``(content, status)`` pairs. Raw, as in
    ``Event``."""

    current_task: str = ""
    todos: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TranscriptLatest:
    """What a client found the session's transcript to say of it now, in the lines it read
    since its last event (Claude Code's ``signet.sync``): the newest git branch a line
    carries, and the agent's newest text and when it was written (None: not said). Raw, as
    in ``Event``."""

    git_branch: str = ""
    last_assistant_message: str = ""
    message_at: datetime | None = None


@dataclass(frozen=True)
class ContextUsage:
    """How full the agent's context is, as its client reported it (``signet.usage``).

    ``model`` names the model the tokens were counted for ('' when the client did not say);
    ``long_context``: its adapter knows that model to have the long context window. Raw
    here, as in ``Event``.
    """

    context_tokens: int
    model: str = ""
    long_context: bool = False


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
    # A session start whose harness brought the session's conversation back as it was, with
    # whatever earlier answers injected into it (its adapter knows which starts do).
    conversation_kept: bool = False
    prompt: str = ""
    remember: str = ""
    files: tuple[str, ...] = ()
    # What the user decided, as a client found it in the transcript (a backlog tool use).
    decisions: tuple[str, ...] = ()
    transcript_path: str = ""
    model: str = ""
    # The adapter knows ``model`` to have the long context window (its harness's own rule).
    long_context: bool = False
    compact_summary: str = ""
    last_assistant_message: str = ""
    previous_session_key: str = ""
    # The harness's cap on injected text (0: none beyond the configured budgets).
    context_cap_chars: int = 0
    transcript: TranscriptExtract | None = None
    usage: ContextUsage | None = None
    tasks: AgentTasks | None = None
    # When a client's outbox held the event: set only on a replay, which may come hours late.
    queued_at: datetime | None = None
    # The harness's own id of what happened (a prompt's, a compaction's), as its adapter
    # spells it: the same whether the harness posted the event itself or a client found it
    # later in the transcript, so the engine applies it once (``engine/backlog.py``).
    delivery_key: str = ""
    # When it happened, for an event a client found in the transcript (its own timestamp).
    happened_at: datetime | None = None
    # What a client found in the transcript since its last event, in order: events the
    # harness should have posted itself, which the server may have missed (an outage).
    backlog: tuple[Event, ...] = ()
    # ...and what those lines say of the session now (its branch, the agent's last words).
    latest: TranscriptLatest | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What the engine decided: the context to inject (already budgeted and redacted)."""

    context: str = ""
    duplicate: bool = False


# What a payload's members may be left out of it: all of one, or all but the named members.
PayloadSkips = Mapping[str, frozenset[str] | None]


class PayloadError(ValueError):
    """The payload cannot be understood; the message says why (it goes back to the client)."""


class HarnessAdapter(Protocol):
    """One harness. ``event_in_path``: its hooks cannot name the event in the body, so they
    post to ``/api/hooks/<harness>/<event>/`` and ``parse`` gets the name from the URL.

    Optional: ``payload_skips`` (``PayloadSkips``), the top-level members of a large payload
    that ``parse`` never reads (None) or reads only some members of (their names); the hook
    view leaves the rest of them unparsed (``checkpoints/api/hook_body.py``).
    """

    harness: str
    context_cap_chars: int
    event_in_path: bool

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        """Normalise a raw payload; raise ``PayloadError`` with a reason when it is unusable."""
        ...

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        """The body the harness expects back for ``event``."""
        ...


# --- payload helpers --------------------------------------------------------------------

# What ``signet.transcript`` may hold: the client reader's own bounds, checked again here.
TRANSCRIPT_ITEMS = 100
TRANSCRIPT_TEXT_CHARS = 4000
COMPACT_SUMMARY_CHARS = 20_000  # what a session keeps of a compaction summary
# ``signet.usage.context_tokens`` is kept up to the column's range on PostgreSQL.
USAGE_MAX_TOKENS = 2**31 - 1
USAGE_MODEL_CHARS = 128
# A replayed event older than this is refused; a client clock this far ahead is tolerated.
QUEUED_AT_MAX_AGE = timedelta(days=30)
QUEUED_AT_MAX_SKEW = timedelta(hours=1)


def text_field(
    payload: dict[str, Any], key: str, *, required: bool = False, where: str = ""
) -> str:
    """The string at ``payload[key]``, cleaned for the database ('' when absent)."""
    value = payload.get(key)
    if value is None:
        if required:
            raise PayloadError(f"'{where}{key}' is required.")
        return ""
    if not isinstance(value, str):
        raise PayloadError(f"'{where}{key}' must be a string, not {type(value).__name__}.")
    return clean_text(value)


def identifier_field(
    payload: dict[str, Any], key: str, *, required: bool = False, where: str = ""
) -> str:
    """A session key at ``payload[key]``, held to the identifier rule ('' when absent)."""
    value = text_field(payload, key, required=required, where=where).strip()
    if not value and not required:
        return ""
    problem = identifier_problem(value)
    if problem:
        raise PayloadError(f"'{where}{key}' {problem}")
    return value


def remembered_text(prompt: str, prefixes: tuple[str, ...]) -> str:
    """The note of a prompt that starts with one of the harness's remember ``prefixes``."""
    stripped = prompt.lstrip()
    for prefix in prefixes:
        if stripped.startswith(prefix):
            rest = stripped[len(prefix) :]
            if prefix == "#" and rest.startswith("#"):  # a Markdown heading, not a note
                return ""
            return rest.strip()
    return ""


def client_block(payload: dict[str, Any]) -> dict[str, Any]:
    """The ``signet`` object a hook client adds ({} when there is none)."""
    client = payload.get("signet")
    if client is None:
        return {}
    if not isinstance(client, dict):
        raise PayloadError("'signet' must be an object.")
    return client


def client_fields(client: dict[str, Any]) -> dict[str, Any]:
    """The ``Event`` fields the ``signet`` object carries, whatever the harness."""
    return {
        "client_project": text_field(client, "project_normalized"),
        "client_git_root": text_field(client, "git_root"),
        "git_branch": text_field(client, "git_branch"),
        "git_head": text_field(client, "git_head"),
        "previous_session_key": identifier_field(client, "previous_session_key"),
        "queued_at": queued_at_parse(client),
        "usage": usage_parse(client),
        "tasks": tasks_parse(client),
    }


def queued_at_parse(client: dict[str, Any]) -> datetime | None:
    """``signet.queued_at``: when the client's outbox took the event (ISO 8601), if it did."""
    raw = text_field(client, "queued_at")
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise PayloadError("'signet.queued_at' must be an ISO 8601 time.") from None
    now = timezone.now()
    if not now - QUEUED_AT_MAX_AGE <= moment <= now + QUEUED_AT_MAX_SKEW:
        raise PayloadError(
            "'signet.queued_at' must lie within the last "
            f"{QUEUED_AT_MAX_AGE.days} days (an outbox keeps nothing older)."
        )
    return moment


def usage_parse(client: dict[str, Any]) -> ContextUsage | None:
    """``signet.usage``: ``{"context_tokens": N, "model": "..."}`` from any client that counts
    its context (the Claude Code hook client reads it from the transcript at Stop)."""
    usage = client.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise PayloadError("'signet.usage' must be an object.")
    tokens = usage.get("context_tokens")
    if tokens is None:
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int | float) or tokens != tokens:
        raise PayloadError("'signet.usage.context_tokens' must be a number.")
    if tokens < 0:
        raise PayloadError("'signet.usage.context_tokens' must not be negative.")
    model = text_field(usage, "model", where="signet.usage.")[:USAGE_MODEL_CHARS]
    return ContextUsage(context_tokens=int(min(tokens, USAGE_MAX_TOKENS)), model=model)


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PayloadError(f"'signet.transcript.{key}' must be a list of strings.")
    return tuple(clean_text(item)[:TRANSCRIPT_TEXT_CHARS] for item in value[-TRANSCRIPT_ITEMS:])


def _todos(value: Any, where: str = "transcript") -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    problem = f"'signet.{where}.todos' must be a list of {{content, status}} objects."
    if not isinstance(value, list):
        raise PayloadError(problem)
    todos = []
    for item in value[:TRANSCRIPT_ITEMS]:
        if not isinstance(item, dict):
            raise PayloadError(problem)
        content, status = item.get("content"), item.get("status")
        if not isinstance(content, str) or not isinstance(status, str):
            raise PayloadError(problem)
        todos.append((clean_text(content)[:TRANSCRIPT_TEXT_CHARS], clean_text(status)[:32]))
    return tuple(todos)


def transcript_parse(client: dict[str, Any]) -> TranscriptExtract | None:
    """``signet.transcript``: what the hook client read from the transcript's tail."""
    facts = client.get("transcript")
    if facts is None:
        return None
    if not isinstance(facts, dict):
        raise PayloadError("'signet.transcript' must be an object.")
    tokens = facts.get("context_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        raise PayloadError("'signet.transcript.context_tokens' must be an integer or null.")

    def text(key: str) -> str:
        return text_field(facts, key, where="signet.transcript.")[:TRANSCRIPT_TEXT_CHARS]

    return TranscriptExtract(
        current_task=text("current_task"),
        todos=_todos(facts.get("todos")),
        recent_prompts=_strings(facts.get("recent_prompts"), "recent_prompts"),
        modified_files=_strings(facts.get("modified_files"), "modified_files"),
        last_assistant_message=text("last_assistant_message"),
        git_branch=text("git_branch"),
        context_tokens=tokens,
        goal=text("goal"),
        compact_summary=text_field(facts, "compact_summary", where="signet.transcript.")[
            :COMPACT_SUMMARY_CHARS
        ],
        decisions=_strings(facts.get("decisions"), "decisions"),
    )


def tasks_parse(client: dict[str, Any]) -> AgentTasks | None:
    """``signet.tasks``: the agent's task list as the hook client read it on its machine."""
    tasks = client.get("tasks")
    if tasks is None:
        return None
    if not isinstance(tasks, dict):
        raise PayloadError("'signet.tasks' must be an object.")
    current = text_field(tasks, "current_task", where="signet.tasks.")[:TRANSCRIPT_TEXT_CHARS]
    return AgentTasks(current_task=current, todos=_todos(tasks.get("todos"), "tasks"))
