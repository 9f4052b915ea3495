"""Claude Code: hook payloads in (``hook_event_name`` names the event), hook output out.

Formats: Claude Code's hooks reference (input fields per event, ``hookSpecificOutput``).
Only SessionStart and UserPromptSubmit can add context, at most 10,000 characters; every
other reply is an empty success, and no reply ever carries a blocking decision. A prompt
starting with ``#`` or ``/remember`` is a note to keep.

What the server missed of the prompts, edits and compactions (``http`` hooks, which Claude
Code posts once, in installs not yet upgraded; an outbox that dropped its oldest) the hook
client finds in the transcript and sends with its next event as ``signet.sync``. Both name
a prompt by the same id (the hook's ``prompt_id``, the transcript line's ``promptId``, since
2.1.196), an edit by its ``tool_use_id`` and a compaction by the prompt it happened in: the
``delivery_key`` that lets the engine apply each once. With them the client sends the
newest git branch of the lines it read and the agent's newest text in them, which a live
event makes the session's (``engine/backlog.py``). A session killed mid-turn sends no more
events: the next session started in its project sends its catch-up for it first, as a
``SignetSync`` event, which does nothing but apply its ``signet.sync``.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    PayloadError,
    PayloadSkips,
    TranscriptLatest,
    clean_text,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
    transcript_parse,
)
from hooks.transcripts.prompts import prompt_text

EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
# Of a tool's input only the edited file's path is read (``_tool_files``), and nothing of its
# result: a Write carries the whole file in both.
TOOL_PATH_FIELDS = frozenset({"file_path", "notebook_path"})
PAYLOAD_SKIPS: PayloadSkips = {
    "tool_input": TOOL_PATH_FIELDS,
    "tool_response": None,
}
KINDS = {
    "SessionStart": EventKind.SESSION_START,
    "UserPromptSubmit": EventKind.PROMPT,
    "PostToolUse": EventKind.TOOL_USE,
    "PreCompact": EventKind.PRE_COMPACT,
    "PostCompact": EventKind.POST_COMPACT,
    "Stop": EventKind.STOP,
    "SessionEnd": EventKind.SESSION_END,
    # Not a Claude Code event: what a client sends to keep a note explicitly.
    "Remember": EventKind.REMEMBER,
    # Not a Claude Code event either: a session's catch-up (``signet.sync`` and nothing
    # else) that a new session's start sends for it, when its transcript grew after its
    # last hook (killed mid-turn: ``hooks/transcripts/sync.py``).
    "SignetSync": EventKind.SYNC,
}
CONTEXT_EVENTS = {EventKind.SESSION_START: "SessionStart", EventKind.PROMPT: "UserPromptSubmit"}
REMEMBER_PREFIXES = ("/remember", "#")
# Claude Code runs a model named with this mark with the 1M-token window (``opus[1m]``).
LONG_CONTEXT_MARK = "[1m]"
# ...and these with it without the mark: the models its catalogue (2.1.197) gives a native
# 1M window. The API, and so the transcript and the usage the client reports, names the
# model without the mark, and a headless SessionStart names none.
NATIVE_LONG_CONTEXT = (
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-sonnet-5",
    "claude-fable-5",
    "claude-mythos-5",
)
# The most ``signet.sync`` may hold: the client sends at most half of it per event.
SYNC_MAX_EVENTS = 200
SYNC_TEXT_CHARS = 100_000
SYNC_ID_CHARS = 128


def _delivery_key(kind: str, value: Any) -> str:
    """``kind:id`` for a harness id, '' for none (an older Claude Code sends no prompt id)."""
    if not isinstance(value, str) or not value or len(value) > SYNC_ID_CHARS:
        return ""
    return f"{kind}:{clean_text(value)}"


def _happened_at(value: Any) -> datetime | None:
    """A transcript line's ``timestamp``; None when it is missing or not a time (the event
    that carries it stands in for it then)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _tool_files(tool_name: str, tool_input: Any) -> tuple[str, ...]:
    if tool_name not in EDIT_TOOLS or not isinstance(tool_input, dict):
        return ()
    path = tool_input.get("file_path") or tool_input.get("notebook_path")  # TOOL_PATH_FIELDS
    return (clean_text(path),) if isinstance(path, str) and path else ()


class ClaudeStyleAdapter:
    """Harnesses whose hooks send Claude Code's shape: ``hook_event_name``, ``session_id``,
    ``cwd``, per-event fields, and ``hookSpecificOutput.additionalContext`` back. A subclass
    names its harness, cap, events (``kinds``), the events that can inject
    (``context_events``) and its note prefixes; ``payload_extra`` adds what its payloads add."""

    harness = ""
    context_cap_chars = 0
    event_in_path = False
    kinds: dict[str, EventKind] = {}
    context_events: dict[EventKind, str] = {}
    remember_prefixes: tuple[str, ...] = ()
    # The session-start sources that bring the session's conversation back whole.
    conversation_kept_on: frozenset[str] = frozenset()
    payload_skips: PayloadSkips = PAYLOAD_SKIPS

    def payload_extra(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Harness-specific values kept in ``Event.extra``."""
        return {}

    def long_context(self, model: str) -> bool:
        """Whether the harness runs ``model`` with the long context window."""
        return False

    def typed_prompt(self, prompt: str) -> str:
        """What a person typed of a prompt the harness sends (all of it, unless the harness
        writes text of its own into prompts)."""
        return prompt

    def backlog_parse(self, client: dict[str, Any], common: dict[str, Any]) -> tuple[Event, ...]:
        """The events a client found in the transcript (``signet.sync``); none here."""
        return ()

    def latest_parse(self, client: dict[str, Any]) -> TranscriptLatest | None:
        """What a client found the transcript to say of the session now (``signet.sync``);
        nothing here."""
        return None

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        name = text_field(payload, "hook_event_name", required=True)
        session_key = identifier_field(payload, "session_id", required=True)
        kind = self.kinds.get(name, EventKind.UNKNOWN)
        client = client_block(payload)
        fields = client_fields(client)
        usage = fields["usage"]
        if usage is not None and self.long_context(usage.model):
            fields["usage"] = dataclasses.replace(usage, long_context=True)
        model = text_field(payload, "model")
        common: dict[str, Any] = {
            "kind": kind,
            "harness": self.harness,
            "session_key": session_key,
            "name": name,
            "cwd": text_field(payload, "cwd"),
            "transcript_path": text_field(payload, "transcript_path"),
            "model": model,
            "long_context": self.long_context(model),
            "context_cap_chars": self.context_cap_chars,
            **fields,
        }
        extra = self.payload_extra(payload)
        common["backlog"] = self.backlog_parse(client, common)
        common["latest"] = self.latest_parse(client)
        if kind is EventKind.SESSION_START:
            source = text_field(payload, "source")
            kept = source in self.conversation_kept_on
            return Event(**common, source=source, conversation_kept=kept, extra=extra)
        if kind is EventKind.PROMPT:
            prompt = self.typed_prompt(text_field(payload, "prompt", required=True))
            remember = remembered_text(prompt, self.remember_prefixes)
            key = _delivery_key("prompt", payload.get("prompt_id"))
            return Event(**common, prompt=prompt, remember=remember, delivery_key=key, extra=extra)
        if kind is EventKind.TOOL_USE:
            tool_name = text_field(payload, "tool_name")
            files = _tool_files(tool_name, payload.get("tool_input"))
            key = _delivery_key("tool", payload.get("tool_use_id"))
            return Event(
                **common, files=files, delivery_key=key, extra={**extra, "tool_name": tool_name}
            )
        if kind is EventKind.REMEMBER:
            note = text_field(payload, "text", required=True)
            return Event(**common, remember=note, extra=extra)
        if kind in (EventKind.PRE_COMPACT, EventKind.POST_COMPACT):
            post = kind is EventKind.POST_COMPACT
            return Event(
                **common,
                source=text_field(payload, "trigger"),
                compact_summary=text_field(payload, "compact_summary"),
                transcript=None if post else transcript_parse(client),
                delivery_key=_delivery_key("compaction", payload.get("prompt_id")) if post else "",
                extra=extra,
            )
        if kind is EventKind.STOP:
            message = text_field(payload, "last_assistant_message")
            return Event(**common, last_assistant_message=message, extra=extra)
        if kind is EventKind.SESSION_END:
            return Event(**common, source=text_field(payload, "reason"), extra=extra)
        return Event(**common, extra=extra)

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        hook_name = self.context_events.get(event.kind)
        if hook_name is None or not outcome.context:
            return {}
        return {
            "hookSpecificOutput": {"hookEventName": hook_name, "additionalContext": outcome.context}
        }


class ClaudeCodeAdapter(ClaudeStyleAdapter):
    harness = "claude-code"
    context_cap_chars = 10_000
    kinds = KINDS
    context_events = CONTEXT_EVENTS
    remember_prefixes = REMEMBER_PREFIXES

    def typed_prompt(self, prompt: str) -> str:
        """The prompt without what Claude Code writes into prompts (the IDE's open file or
        selection, reminders, background tasks' notices; ``prompts.prompt_text``): a prompt
        that is only such a notice, or a local command such as ``/clear``, is '' (counted,
        with no text). A client's ``signet.sync`` prompts pass here too, whatever its version.
        """
        return prompt_text(prompt)

    def long_context(self, model: str) -> bool:
        """A ``[1m]`` model, or one whose window is 1M without the mark (a Bedrock, Vertex or
        Foundry user of such a model, whose window is smaller, is told of its pressure late;
        ``CLAUDE_CODE_DISABLE_1M_CONTEXT`` is not seen here)."""
        name = model.lower()
        if LONG_CONTEXT_MARK in name:
            return True
        # Dated ids and provider prefixes: ``us.anthropic.claude-opus-4-8-20260101-v1:0``.
        return any(native in name for native in NATIVE_LONG_CONTEXT)

    # ``--resume`` and ``--continue`` (headless or not) start SessionStart(resume) on the
    # conversation read back from the transcript, every context a hook injected included;
    # what this start injects stays too, across a later compaction.
    conversation_kept_on = frozenset({"resume"})

    def backlog_parse(self, client: dict[str, Any], common: dict[str, Any]) -> tuple[Event, ...]:
        """``signet.sync.events``: the prompts, edits and compactions the hook client found in
        the transcript since its last event, in the transcript's order, as the events
        Claude Code's ``http`` hooks would have posted (``hooks/transcripts/sync.py``), and
        the user's answers to the agent's questions, which no hook carries."""
        sync = client.get("sync")
        if sync is None:
            return ()
        found = sync.get("events") if isinstance(sync, dict) else None
        if not isinstance(found, list) or len(found) > SYNC_MAX_EVENTS:
            raise PayloadError(
                f"'signet.sync.events' must be a list of at most {SYNC_MAX_EVENTS} objects."
            )
        base = {
            name: common[name]
            for name in ("harness", "session_key", "cwd", "client_project", "context_cap_chars")
        }
        backlog = []
        for item in found:
            if not isinstance(item, dict):
                raise PayloadError("'signet.sync.events' must be a list of objects.")
            event = self._backlog_event(item, base)
            if event is not None:
                backlog.append(event)
        return tuple(backlog)

    def latest_parse(self, client: dict[str, Any]) -> TranscriptLatest | None:
        """``signet.sync.git_branch`` and ``signet.sync.last_assistant_message`` (``{"text",
        "at"}``): the newest branch the client's lines carry and the agent's newest text in
        them (``hooks/transcripts/sync.py``); None when it sent neither."""
        sync = client.get("sync")
        if not isinstance(sync, dict):
            return None
        where = "signet.sync."
        branch = text_field(sync, "git_branch", where=where)[:SYNC_TEXT_CHARS].strip()
        said = sync.get("last_assistant_message")
        if said is not None and not isinstance(said, dict):
            raise PayloadError(f"'{where}last_assistant_message' must be an object.")
        said = said or {}
        where = f"{where}last_assistant_message."
        message = text_field(said, "text", where=where)[:SYNC_TEXT_CHARS].strip()
        if not branch and not message:
            return None
        return TranscriptLatest(
            git_branch=branch,
            last_assistant_message=message,
            message_at=_happened_at(said.get("at")) if message else None,
        )

    def _backlog_event(self, item: dict[str, Any], base: dict[str, Any]) -> Event | None:
        kind = item.get("type")
        where = "signet.sync.events[]."
        at = _happened_at(item.get("at"))
        if kind == "prompt":
            key = _delivery_key("prompt", item.get("id"))
            prompt = self.typed_prompt(text_field(item, "text", where=where)[:SYNC_TEXT_CHARS])
            if not key or not prompt:
                return None
            remember = remembered_text(prompt, self.remember_prefixes)
            return Event(
                kind=EventKind.PROMPT, name="UserPromptSubmit", prompt=prompt, remember=remember,
                delivery_key=key, happened_at=at, **base,
            )  # fmt: skip
        if kind == "edit":
            files = _tool_files(
                text_field(item, "tool", where=where), {"file_path": item.get("file")}
            )
            key = _delivery_key("tool", item.get("id"))
            if not files or not key:
                return None
            return Event(
                kind=EventKind.TOOL_USE, name="PostToolUse", files=files, delivery_key=key,
                happened_at=at, **base,
            )  # fmt: skip
        if kind == "decision":  # the user's answer to the agent's question (AskUserQuestion)
            # Its own kind of key: the call's PostToolUse, if one came, is no answer.
            key = _delivery_key("decision", item.get("id"))
            decision = text_field(item, "text", where=where)[:SYNC_TEXT_CHARS].strip()
            if not key or not decision:
                return None
            return Event(
                kind=EventKind.TOOL_USE, name="AskUserQuestion", decisions=(decision,),
                delivery_key=key, happened_at=at, **base,
            )  # fmt: skip
        if kind == "compaction":
            key = _delivery_key("compaction", item.get("id"))
            summary = text_field(item, "summary", where=where)[:SYNC_TEXT_CHARS]
            if not key or not summary:
                return None
            return Event(
                kind=EventKind.POST_COMPACT, name="PostCompact", compact_summary=summary,
                delivery_key=key, happened_at=at, **base,
            )  # fmt: skip
        return None  # a kind a newer client sends: not this server's business
