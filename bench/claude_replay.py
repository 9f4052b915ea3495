"""Replay a real Claude Code transcript through the installed hooks, as Claude Code fires them.

A temporary HOME gets Signet's hooks installed in ``~/.claude/settings.json`` by the
project's installer (``hooks.install.install_claude_code``, what ``manage.py install_hooks
claude-code --url …`` calls). The transcript is then walked line by line and written under
``HOME/.claude/projects/<cwd, each character but letters and digits made '-'>/<session>.jsonl``
as it grows, so that each hook reads the transcript as it was at that moment; each event
runs the command that settings.json holds for it (matched as Claude Code matches: the
``source``, ``trigger``, ``reason`` or tool name), through ``sh -c``, with the JSON payload
on stdin, and its stdout is read back (``hookSpecificOutput.additionalContext`` is what the
model receives).

What fires, from the lines:

- SessionStart ``startup`` first;
- UserPromptSubmit for each line a person typed: a main-chain user line whose content is
  text (no tool result; not ``isMeta``, not a compaction summary), without what the harness
  writes as a user line (``<task-notification>``, ``<local-command-stdout>``, ``Caveat:``,
  ``[Request interrupted``, bash mode, IDE and system-reminder blocks); a slash command as
  ``/name args``, unless the harness answered it itself (a ``<local-command-stdout>`` before
  any response);
- PreToolUse for each ``tool_use`` (subagents' too), PostToolUse with the matching
  ``tool_result``'s ``toolUseResult`` unless the result is an error; Task calls also update
  the task files Claude Code keeps (``~/.claude/tasks/<session>/<id>.json``);
- Stop at the end of each turn (one begun by a prompt, or by a background task's notice)
  that has a response and was not interrupted, with ``last_assistant_message`` (2.1 on);
  at the cut only if the turn had ended there (the next conversation line starts one);
- for a ``compact_boundary`` already in the transcript: PreCompact before it, SessionStart
  ``compact`` after it and its summary line, and PostCompact with that summary (2.1.76 on);
- for a resumed session whose history was written into the file again (new uuids, the old
  times): SessionEnd and SessionStart ``resume`` where the copy begins, and nothing for the
  copied lines (they are in the transcript the hooks read, and in the baselines).

The lines are read by ``bench/claude_lines.py``, the hooks run by ``bench/claude_hooks.py``.

Not replayed: the model itself (no new summary at the cut, so no PostCompact there), the
subagents' own transcript files, the project folder (``cwd`` does not exist here, so the
client finds no git repository), and the time between events (the hooks run one after the
other, as fast as they answer).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.claude_hooks import Claude, HookRun, ServiceClock
from bench.claude_lines import (
    SYNTHETIC_MODEL,
    conversation_of,
    is_main,
    prompt_of,
    slug_of,
    stamp_of,
    starts_turn,
    summary_of,
    text_blocks,
    tool_results,
    version_of,
)
from hooks.transcripts.tasks import TaskTracker

HEADER = "## Session Recovery Context"
PROMPT_ID_VERSION = (2, 1, 196)
LAST_MESSAGE_VERSION = (2, 1, 0)
POST_COMPACT_VERSION = (2, 1, 76)
# A line this much older than one before it was written again (a resume's copy of history).
COPY_SECONDS = 60.0


class Walk:
    """Lines 1..cut of a transcript fired into one HOME."""

    def __init__(self, raw: list[str], *, claude: Claude, turn_ended: bool) -> None:
        self.raw = raw
        self.records: list[dict[str, Any] | None] = []
        for line in raw:
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            self.records.append(record if isinstance(record, dict) else None)
        self.claude = claude
        self.turn_ended = turn_ended
        conversation = [r for r in self.records if r and r.get("sessionId") and r.get("cwd")]
        if not conversation:
            raise ValueError("no conversation line with a sessionId and a cwd before the cut")
        self.session_id = str(conversation[-1]["sessionId"])
        self.cwd = str(conversation[0]["cwd"])
        self.version = str(next((r["version"] for r in conversation if r.get("version")), ""))
        self.transcript = (
            claude.home / ".claude" / "projects" / slug_of(self.cwd) / f"{self.session_id}.jsonl"
        )
        self.tasks = TaskTracker()
        self.tool_uses: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
        self.model = next(
            (
                str(r["message"]["model"])
                for r in self.records
                if r and r.get("type") == "assistant" and isinstance(r.get("message"), dict)
                and r["message"].get("model") not in (None, SYNTHETIC_MODEL)
            ),
            "",
        )  # fmt: skip
        self.permission_mode = "default"
        self.prompt_id = ""
        self.turn_open = False
        self.turn_answered = False
        self.interrupted = False
        self.last_message = ""
        self.last_uuid = ""
        self.branch = ""
        self.latest = float("-inf")  # the latest line's time so far (Unix seconds)
        stamps = [at for r in self.records if r is not None and (at := stamp_of(r))]
        first = min(stamps) if stamps else datetime.now(UTC)
        self.moment = first - timedelta(seconds=1)  # the transcript's time now
        self.copying = False
        self.prompts: list[str] = []
        self.conversation: list[str] = []  # the naive baseline's text, in order

    def fire(self, payload: dict[str, Any], *, later: float = 0.0) -> str:
        """Fire the event at the transcript's time now (``later`` seconds after it)."""
        return self.claude.fire(payload, at=self.moment + timedelta(seconds=later))

    def advance(self, record: dict[str, Any]) -> None:
        """The transcript's time moves to the line's (never back: copies keep old times)."""
        at = stamp_of(record)
        if at is not None and at > self.moment:
            self.moment = at

    def base(self, event: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.transcript),
            "cwd": self.cwd,
            "hook_event_name": event,
            **fields,
        }

    def turn_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"permission_mode": self.permission_mode}
        if self.prompt_id and version_of(self.version) >= PROMPT_ID_VERSION:
            fields["prompt_id"] = self.prompt_id
        return fields

    def append(self, index: int) -> None:
        with self.transcript.open("a", encoding="utf-8") as handle:
            handle.write(self.raw[index].rstrip("\n") + "\n")
        record = self.records[index]
        if record is not None:
            if isinstance(record.get("uuid"), str) and is_main(record):
                self.last_uuid = record["uuid"]
            if isinstance(record.get("gitBranch"), str) and record["gitBranch"]:
                self.branch = record["gitBranch"]
            if isinstance(record.get("permissionMode"), str):
                self.permission_mode = record["permissionMode"]

    def write_line(self, record: dict[str, Any]) -> None:
        with self.transcript.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")

    def stop(self) -> None:
        """The end of the open turn: Stop, unless it had no response or was interrupted."""
        if self.turn_open and self.turn_answered and not self.interrupted:
            fields = self.turn_fields()
            fields["stop_hook_active"] = False
            if version_of(self.version) >= LAST_MESSAGE_VERSION:
                fields["last_assistant_message"] = self.last_message
            self.fire(self.base("Stop", **fields))
        self.turn_open = self.turn_answered = self.interrupted = False

    def run(self) -> None:
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.fire(self.base("SessionStart", source="startup", model=self.model))
        compacting: str | None = None
        for index, record in enumerate(self.records):
            if record is None:
                continue  # not a line Claude Code writes (a comment someone added)
            self.advance(record)
            if compacting is not None:
                trigger, compacting = compacting, None
                if record.get("isCompactSummary"):
                    self.append(index)
                    self.compacted(trigger, summary_of(record))
                    continue
                self.compacted(trigger, "")
            if record.get("type") == "system" and record.get("subtype") == "compact_boundary":
                trigger = str((record.get("compactMetadata") or {}).get("trigger") or "auto")
                self.fire(self.base("PreCompact", trigger=trigger, custom_instructions=""))
                self.append(index)
                compacting = trigger
                continue
            self.line(index, record)
        if compacting is not None:
            self.compacted(compacting, "")
        if self.turn_ended:
            self.stop()

    def compacted(self, trigger: str, summary: str) -> None:
        self.fire(self.base("SessionStart", source="compact", model=self.model))
        if summary and version_of(self.version) >= POST_COMPACT_VERSION:
            self.fire(self.base("PostCompact", trigger=trigger, compact_summary=summary))

    def copied(self, record: dict[str, Any]) -> bool:
        """Whether the line re-writes an earlier one (a resumed session's history, written
        again with new uuids and the old times): Claude Code fires nothing for those."""
        stamp = record.get("timestamp")
        if record.get("type") not in ("user", "assistant") or not isinstance(stamp, str):
            return False
        try:
            at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return False
        copy = at < self.latest - COPY_SECONDS
        self.latest = max(self.latest, at)
        if copy and not self.copying:
            # The session was resumed: the process before ended, a new one starts.
            self.stop()
            self.fire(self.base("SessionEnd", reason="prompt_input_exit"))
            self.fire(self.base("SessionStart", source="resume", model=self.model))
        self.copying = copy
        return copy

    def line(self, index: int, record: dict[str, Any]) -> None:
        kind = record.get("type")
        prompt = prompt_of(self.records, index)
        if self.copied(record):
            self.append(index)
            if prompt is not None:
                self.prompts.append(prompt)
                self.conversation.append(f"User: {prompt}")
            elif kind == "assistant" and isinstance(record.get("message"), dict):
                self.conversation.extend(conversation_of(record))
            return
        if prompt is not None:
            self.stop()
            promptid = record.get("promptId")
            self.prompt_id = promptid if isinstance(promptid, str) else ""
            self.last_message = ""
            self.fire(self.base("UserPromptSubmit", **self.turn_fields(), prompt=prompt))
            self.append(index)
            self.prompts.append(prompt)
            self.conversation.append(f"User: {prompt}")
            self.turn_open = True
            return
        if kind == "assistant" and isinstance(record.get("message"), dict):
            self.append(index)
            self.assistant(record)
            return
        if kind == "user" and tool_results(record):
            self.results(record)
            self.append(index)
            return
        if starts_turn(record):
            self.stop()
            self.prompt_id = ""
            self.last_message = ""
            self.turn_open = True
        elif kind == "user" and is_main(record):
            text = "".join(text_blocks((record.get("message") or {}).get("content"))).lstrip()
            if text.startswith("[Request interrupted"):
                self.interrupted = True
        self.append(index)

    def assistant(self, record: dict[str, Any]) -> None:
        message = record["message"]
        if message.get("model") == SYNTHETIC_MODEL:
            return
        main = is_main(record)
        self.conversation.extend(conversation_of(record))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and main and str(block.get("text", "")).strip():
                self.last_message = str(block["text"]).strip()
                self.turn_answered = True
            elif block.get("type") == "tool_use":
                name, tool_input = str(block.get("name")), block.get("input")
                tool_input = tool_input if isinstance(tool_input, dict) else {}
                extra: dict[str, Any] = {}
                if not main and isinstance(record.get("agentId"), str):
                    extra["agent_id"] = record["agentId"]
                self.tool_uses[str(block.get("id"))] = (name, tool_input, extra)
                self.tasks.tool_use(name, block.get("id"), tool_input)
                self.turn_answered = self.turn_answered or main
                self.fire(
                    self.base(
                        "PreToolUse",
                        **self.turn_fields(),
                        **extra,
                        tool_name=name,
                        tool_input=tool_input,
                        tool_use_id=block.get("id"),
                    )
                )

    def results(self, record: dict[str, Any]) -> None:
        blocks = tool_results(record)
        result = record.get("toolUseResult")
        for block in blocks:
            found = self.tool_uses.pop(str(block.get("tool_use_id")), None)
            if found is None:
                continue
            name, tool_input, extra = found
            if self.tasks.tool_result(block, result) or name == "TaskUpdate":
                self.task_files()
            if block.get("is_error") is True:
                continue  # a failed call fires no PostToolUse
            response = result if len(blocks) == 1 else {}
            self.fire(
                self.base(
                    "PostToolUse",
                    **self.turn_fields(),
                    **extra,
                    tool_name=name,
                    tool_input=tool_input,
                    tool_response=response if response is not None else {},
                    tool_use_id=block.get("tool_use_id"),
                )
            )

    def task_files(self) -> None:
        """The task list as Claude Code keeps it on disk, one file per task."""
        name = re.sub(r"[^A-Za-z0-9_-]", "-", self.session_id)
        folder = self.claude.home / ".claude" / "tasks" / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        for task_id, (subject, status, active, description) in self.tasks.tasks.items():
            if not subject:
                continue
            (folder / f"{task_id}.json").write_text(
                json.dumps(
                    {
                        "id": task_id,
                        "subject": subject,
                        "description": description,
                        "activeForm": active,
                        "status": status,
                        "blocks": [],
                        "blockedBy": [],
                    }
                )
            )


@dataclass
class Contexts:
    """What one replay gave the model at each point that counts, and how it went."""

    after_compaction: str = ""
    continue_prompt: str = ""
    new_after: str = ""
    new_after_dead: str = ""
    compaction_hooks: list[HookRun] = field(default_factory=list)
    dead_hooks: list[HookRun] = field(default_factory=list)
    compaction_seconds: float = 0.0
    dead_seconds: float = 0.0
    prompts: list[str] = field(default_factory=list)
    conversation: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return (self.after_compaction + "\n" + self.continue_prompt).count(HEADER) == 1


def transcript_line(walk: Walk, later: float, **fields: Any) -> dict[str, Any]:
    """A line Claude Code writes into the session's transcript, ``later`` seconds after the
    transcript's time now."""
    at = walk.moment + timedelta(seconds=later)
    return {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": walk.cwd,
        "sessionId": walk.session_id,
        "version": walk.version,
        "gitBranch": walk.branch,
        **fields,
        "uuid": str(uuid.uuid4()),
        "timestamp": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def new_session_start(walk: Walk, *, later: float) -> str:
    """A new session (a new id) starting in the same project ``later`` seconds after the
    transcript's time now: its SessionStart's context."""
    session_id = str(uuid.uuid4())
    payload = {
        "session_id": session_id,
        "transcript_path": str(walk.transcript.with_name(f"{session_id}.jsonl")),
        "cwd": walk.cwd,
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    if walk.model:
        payload["model"] = walk.model
    return walk.fire(payload, later=later)


# When the cut's events come, in seconds after its last line: an automatic compaction (its
# summary takes the model most of a minute), the next prompt, the end, the next session.
PRE_COMPACT_AFTER = 1.0
COMPACTED_AFTER = 45.0
CONTINUE_AFTER = 60.0
END_AFTER = 120.0
NEXT_SESSION_AFTER = 130.0
# ...and after a session that died there, the next one (started at once).
RESTART_AFTER = 5.0


def replay(
    raw: list[str],
    *,
    turn_ended: bool,
    url: str,
    tokens: tuple[str, str],
    clock: ServiceClock | None = None,
    workdir: Path | None = None,
) -> Contexts:
    """The two scenarios of one transcript (its lines up to the cut, ``raw``; whether the
    turn under way there had ended, ``turn_ended``), each in a HOME of its own for an
    owner of its own (``tokens``): compaction at the cut, then a new session after it; and a
    session that dies at the cut, then a new session at once. With ``clock`` (installed as
    the service's), each event comes at its time in the transcript."""
    contexts = Contexts()
    base = Path(tempfile.mkdtemp(prefix="signet-replay-", dir=workdir))
    try:
        # Compaction at the cut.
        began = time.perf_counter()
        home = base / "compaction"
        home.mkdir()
        claude = Claude(home=home, token=tokens[0], url=url, clock=clock)
        walk = Walk(raw, claude=claude, turn_ended=turn_ended)
        walk.run()
        contexts.prompts = walk.prompts
        contexts.conversation = walk.conversation
        precompact = walk.base("PreCompact", trigger="auto", custom_instructions="")
        walk.fire(precompact, later=PRE_COMPACT_AFTER)
        metadata = {"trigger": "auto", "preTokens": 0}
        walk.write_line(
            transcript_line(
                walk,
                COMPACTED_AFTER,
                logicalParentUuid=walk.last_uuid or None,
                type="system",
                subtype="compact_boundary",
                content="Conversation compacted",
                isMeta=False,
                level="info",
                compactMetadata=metadata,
            )
        )
        compacted = walk.base("SessionStart", source="compact", model=walk.model)
        contexts.after_compaction = walk.fire(compacted, later=COMPACTED_AFTER)
        prompt_id = str(uuid.uuid4()) if version_of(walk.version) >= PROMPT_ID_VERSION else ""
        walk.prompt_id = prompt_id
        prompt = walk.base("UserPromptSubmit", **walk.turn_fields(), prompt="continue")
        contexts.continue_prompt = walk.fire(prompt, later=CONTINUE_AFTER)
        message = {"role": "user", "content": "continue"}
        extra = {"promptId": prompt_id} if prompt_id else {}
        walk.write_line(
            transcript_line(walk, CONTINUE_AFTER, type="user", message=message, **extra)
        )
        walk.fire(walk.base("SessionEnd", reason="prompt_input_exit"), later=END_AFTER)
        contexts.new_after = new_session_start(walk, later=NEXT_SESSION_AFTER)
        contexts.compaction_hooks = claude.runs
        contexts.compaction_seconds = time.perf_counter() - began

        # The process dies at the cut: no PreCompact, no SessionEnd; a new session at once.
        began = time.perf_counter()
        home = base / "dead"
        home.mkdir()
        claude = Claude(home=home, token=tokens[1], url=url, clock=clock)
        walk = Walk(raw, claude=claude, turn_ended=turn_ended)
        walk.run()
        contexts.new_after_dead = new_session_start(walk, later=RESTART_AFTER)
        contexts.dead_hooks = claude.runs
        contexts.dead_seconds = time.perf_counter() - began
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return contexts
