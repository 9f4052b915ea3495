"""Bounded reader for Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``,
the ``transcript_path`` of Codex's hook payloads), run by the hook client at PreCompact.

The format, from ``openai/codex`` (``codex-rs/protocol/src/protocol.rs``, later
``codex-rs/history/src/lib.rs``: ``RolloutLine``/``RolloutItem``; ``codex-rs/rollout/src/
policy.rs``: what is persisted): one JSON object a line, ``{"timestamp", ["ordinal",]
"type", "payload"}``, the type one of

- ``session_meta`` (the first line): ``cwd``, ``cli_version``, ``git: {commit_hash, branch,
  repository_url}``;
- ``turn_context`` (each turn): ``model``, ``cwd``;
- ``response_item``: what the model saw and said. ``message`` with ``role``
  ``user|assistant|developer`` and ``content: [{"type": "input_text"|"output_text", "text"}]``
  (Codex also writes its own context as user messages: ``<environment_context>``, AGENTS.md
  as ``# AGENTS.md instructions for <dir>`` + ``<INSTRUCTIONS>``, ``<user_instructions>``,
  hook context, skills, shell-command and abort notices); ``function_call`` with ``name``,
  ``arguments`` (a JSON string) and ``call_id`` (``update_plan``: ``{"plan": [{"step",
  "status"}]}``; ``apply_patch``: ``{"input": patch}``; ``shell``: ``{"command": [...]}``);
  ``custom_tool_call`` (the freeform ``apply_patch``: ``input`` is the patch);
  ``local_shell_call``; ``function_call_output``/``custom_tool_call_output``; ``reasoning``;
- ``event_msg``: ``user_message`` (``message``: what the person typed; older versions add a
  ``kind``, ``plain`` for that), ``agent_message``, ``token_count`` (``info:
  {last_token_usage: {input_tokens, cached_input_tokens, output_tokens, total_tokens, …},
  total_token_usage, model_context_window}``), ``patch_apply_end`` (``call_id``,
  ``success``), ``context_compacted``, ``thread_rolled_back`` (``num_turns``);
- ``compacted``: ``{message, replacement_history?}``, one per compaction.

Facts: the prompts are the ``user_message`` events (the response items' user messages when
the tail holds none, as older rollouts may), harness text and rolled-back turns left out;
the current task is the
plan's ``in_progress`` step (``update_plan``); modified files are the paths an
``apply_patch`` names (``*** Update File:``, ``*** Add File:``, ``*** Move to:``), whether
called as a tool or through the shell, unless Codex reports the patch failed (shell edits
such as ``sed -i`` are not counted); the branch is ``session_meta``'s (read from the file's
first line when the tail does not reach it); the context size is the last
``token_count``'s ``last_token_usage.total_tokens`` (Codex's ``tokens_in_context_window``),
unknown again after a compaction until the next one.

Only the tail is read (2 MiB), every line on its own; nothing here raises for I/O errors
or bad content. Imports are what the hook client has loaded already.
"""

from __future__ import annotations

import os

from .facts import Facts, Prompts, decode, starts_with_any
from .usage import iter_lines, read_tail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
# session_meta (the first line) holds the base instructions: tens of kB.
HEAD_MAX_BYTES = 256 * 1024

# Text Codex itself puts in user messages (``is_contextual_user_fragment`` in
# ``codex-rs/core/src/context/``), lower case.
HARNESS_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# agents.md instructions for ",
    "<instructions>",
    "<hook_context>",
    "<hook_prompt",
    "<skill>",
    "<skills_instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
    "<permissions instructions>",
    "<collaboration_mode>",
    "<model_switch>",
)
PATCH_BEGIN = "*** Begin Patch"
PATCH_PATH_MARKS = ("*** Update File: ", "*** Add File: ", "*** Move to: ")
PATCH_FAILED = "apply_patch verification failed"
SHELL_TOOLS = ("shell", "shell_command", "exec_command", "container.exec", "local_shell")

# Lines skipped unparsed: tool output and reasoning are most of a rollout's bytes and none
# of its facts (an apply_patch output may say the patch failed: those are parsed).
_SKIP_MARKS = (
    b'"payload":{"type":"function_call_output"',
    b'"payload":{"type":"custom_tool_call_output"',
    b'"payload":{"type":"reasoning"',
)
_FAILED_MARK = PATCH_FAILED.encode()


def read_rollout(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, loads: Any = None
) -> dict[str, Any] | None:
    """The ``signet.transcript`` facts of the rollout at ``path``, from its last
    ``max_bytes``, each line parsed with ``loads`` (``json.loads`` by default); None when
    the path is missing, not a regular file or unreadable."""
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    if loads is None:
        import json

        loads = json.loads
    try:
        tail = read_tail(path, max_bytes)
    except (OSError, ValueError):
        return None
    if tail is None:
        return None
    data, truncated = tail
    head = _first_line(path) if truncated else None
    return parse_lines(iter_lines(data), truncated=truncated, loads=loads, head=head)


def parse_lines(
    lines: Iterable[str | bytes],
    *,
    truncated: bool = False,
    loads: Any = None,
    head: bytes | None = None,
) -> dict[str, Any]:
    """The facts of rollout lines in file order; ``head``: the file's first line when the
    lines are a tail that does not include it."""
    if loads is None:
        import json

        loads = json.loads
    reader = _Reader(loads)
    if head is not None:
        record = decode(head, loads)
        if record is not None and record.get("type") == "session_meta":
            reader.feed(record)
    for raw in lines:
        skipped = isinstance(raw, bytes) and any(mark in raw for mark in _SKIP_MARKS)
        if skipped and _FAILED_MARK not in raw:
            continue
        record = decode(raw, loads) if isinstance(raw, (str, bytes)) else None
        if record is not None:
            reader.feed(record)
    return reader.payload(truncated=truncated)


def _first_line(path: str | os.PathLike[str]) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            chunk = handle.read(HEAD_MAX_BYTES)
    except (OSError, ValueError):
        return None
    end = chunk.find(b"\n")
    return chunk[:end] if end >= 0 else None


def _texts(content: object, kinds: tuple[str, ...]) -> list[str] | None:
    """The texts of a message's content items of the given types; None when the content
    is not a list."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return None
    return [
        item["text"]
        for item in content
        if isinstance(item, dict)
        and item.get("type") in kinds
        and isinstance(item.get("text"), str)
    ]


def _is_harness_text(text: str) -> bool:
    return starts_with_any(text, HARNESS_PREFIXES)


def patch_paths(patch: str) -> list[str]:
    """The files an apply_patch patch adds, updates or moves to, in its order."""
    paths = []
    for line in patch.splitlines():
        line = line.strip()
        for mark in PATCH_PATH_MARKS:
            if line.startswith(mark):
                paths.append(line[len(mark) :].strip())
    return paths


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            item["text"]
            for item in output
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        )
    if isinstance(output, dict):
        for key in ("content", "output"):
            if isinstance(output.get(key), str):
                return str(output[key])
    return ""


class _Reader:
    def __init__(self, loads: Any) -> None:
        self.facts = Facts()
        self.events = Prompts()  # event_msg user_message: what the person typed
        self.items = Prompts()  # response_item user messages: the fallback
        self.loads = loads  # for the calls' arguments, JSON in a string

    def feed(self, record: dict[str, Any]) -> None:
        kind, payload = record.get("type"), record.get("payload")
        if not isinstance(payload, dict):
            return
        if kind == "response_item":
            self._item(payload)
        elif kind == "event_msg":
            self._event(payload)
        elif kind == "turn_context":
            model = payload.get("model")
            if isinstance(model, str) and model:
                self.facts.model = model
        elif kind == "session_meta":
            # The first one is this session's; a fork copies its parent's after it.
            git = payload.get("git")
            branch = git.get("branch") if isinstance(git, dict) else None
            if isinstance(branch, str) and branch and not self.facts.git_branch:
                self.facts.git_branch = branch
        elif kind == "compacted":
            message = payload.get("message")
            self.facts.compacted(message if isinstance(message, str) else "")

    def _event(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "user_message":
            self.events.seen = True
            message, plain = payload.get("message"), payload.get("kind", "plain")
            typed = message if isinstance(message, str) and plain in ("plain", None) else ""
            if typed and not _is_harness_text(typed):
                self.events.add(typed)
        elif kind == "agent_message":
            message = payload.get("message")
            if isinstance(message, str):
                self.facts.assistant(message)
        elif kind == "token_count":
            info = payload.get("info")
            usage = info.get("last_token_usage") if isinstance(info, dict) else None
            total = usage.get("total_tokens") if isinstance(usage, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                self.facts.context_tokens = total
        elif kind == "thread_rolled_back":
            # The last ``num_turns`` user turns were taken out of the conversation.
            turns = payload.get("num_turns")
            if isinstance(turns, int) and not isinstance(turns, bool):
                self.events.drop(turns)
                self.items.drop(turns)
        elif kind == "patch_apply_end":
            call = payload.get("call_id")
            if payload.get("success") is False and isinstance(call, str):
                self.facts.untouch(call)

    def _item(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        call = payload.get("call_id")
        call = call if isinstance(call, str) else ""
        if kind == "message":
            role = payload.get("role")
            if role == "user":
                texts = _texts(payload.get("content"), ("input_text", "text"))
                # Codex's rule: one harness fragment makes the whole message the harness's.
                if texts and not any(_is_harness_text(text) for text in texts):
                    self.items.add("\n".join(texts))
            elif role == "assistant":
                texts = _texts(payload.get("content"), ("output_text", "text"))
                if texts:
                    self.facts.assistant("\n".join(texts))
        elif kind in ("function_call", "custom_tool_call"):
            self._call(payload.get("name"), payload, call)
        elif kind == "local_shell_call":
            action = payload.get("action")
            if isinstance(action, dict):
                self._shell(action.get("command"), call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            # Codex refused the patch before applying it: no file changed.
            failed = PATCH_FAILED in _output_text(payload.get("output"))[:1000]
            if failed:
                self.facts.untouch(call)

    def _arguments(self, payload: dict[str, Any]) -> object:
        raw = payload.get("arguments", payload.get("input"))
        if not isinstance(raw, str) or not raw.lstrip().startswith("{"):
            return raw
        try:
            return self.loads(raw.encode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError):
            return raw

    def _call(self, name: object, payload: dict[str, Any], call: str) -> None:
        if name == "update_plan":
            args = self._arguments(payload)
            if isinstance(args, dict):
                self.facts.set_todos(args.get("plan"), "step")
        elif name == "apply_patch":
            args = self._arguments(payload)
            if isinstance(args, dict):
                args = args.get("input", args.get("patch"))
            if isinstance(args, str):
                for path in patch_paths(args):
                    self.facts.touch(path, call)
        elif name in SHELL_TOOLS:
            args = self._arguments(payload)
            if isinstance(args, dict):
                self._shell(args.get("command", args.get("cmd")), call)

    def _shell(self, command: object, call: str) -> None:
        """A shell call that runs apply_patch (``["apply_patch", patch]``, or a heredoc in
        ``bash -lc``), which Codex applies as a patch; any other command is not read."""
        if isinstance(command, list):
            command = "\n".join(part for part in command if isinstance(part, str))
        if not isinstance(command, str) or PATCH_BEGIN not in command:
            return
        if "apply_patch" not in command and "applypatch" not in command:
            return
        for path in patch_paths(command):
            self.facts.touch(path, call)

    def payload(self, *, truncated: bool) -> dict[str, Any]:
        prompts = self.events if self.events.seen else self.items
        return self.facts.payload(truncated=truncated, prompts=prompts)
