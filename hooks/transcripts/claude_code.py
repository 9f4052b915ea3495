"""Bounded reader for Claude Code session transcripts (``~/.claude/projects/*/<session>.jsonl``).

It runs in the hook client, on the agent's machine, where the transcript is: the server
never opens a file a request names. ``TranscriptFacts.as_payload()`` is what the client
sends as ``signet.transcript`` with PreCompact.

The format is undocumented (see ``protocols.md`` §2); this reader trusts nothing in it. Only
the tail of the file is read, every line is parsed on its own, and a line that is not what we
expect is skipped, so a half-written, truncated or corrupted transcript yields whatever facts
its readable lines hold. Nothing here raises for I/O errors or bad content.

The hook client imports it at PreCompact, where its imports were most of the run: json, re,
dataclasses (and through it inspect) took about 20 ms, longer than reading 2 MiB. So it
imports only what the interpreter has loaded already: the caller may pass its own JSON
decoder (``json.loads`` otherwise), and the records are small classes of their own.
"""

from __future__ import annotations

import os

from .prompts import goal_worthy, prompt_text, strip_ansi
from .tasks import TaskTracker, current_task, read_task_files
from .usage import SYNTHETIC_MODEL, UsageTracker, is_tool_result, iter_lines, read_tail

TYPE_CHECKING = False  # typing's own import costs more than this module's work
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    _Json = dict[str, Any]
    Loads = Callable[[Any], Any]

DEFAULT_MAX_BYTES = 2 * 1024 * 1024

MAX_PROMPTS = 10
PROMPT_CHARS = 500
MAX_DECISIONS = 20
DECISION_CHARS = 300
MESSAGE_CHARS = 2000
SUMMARY_CHARS = 20_000
MAX_MODIFIED_FILES = 50
MAX_TODOS = 100
MAX_PATH_CHARS = 4096

# Tool name -> the input field naming the file it changes.
EDIT_TOOLS = {
    "Edit": "file_path",
    "Write": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}

# What Claude Code writes around a compaction's summary in the transcript (PostCompact's
# ``compact_summary`` is the summary alone).
SUMMARY_OPENING = "This session is being continued from a previous conversation"
_SUMMARY_PREAMBLE = "The summary below covers the earlier portion of the conversation."
_SUMMARY_TRAILER = "\n\nIf you need specific details from before compaction"
# A tool result that failed or that the user rejected says so (the bare quotes make it a key
# of the line's own, not text inside a string); the edit it answers changed nothing.
ERROR_MARK = b'"is_error":true'
# A rejected call's result, when the user typed why: what follows the phrase is a prompt.
REJECTED_OPENING = "The user doesn't want to proceed with this tool use."
USER_SAID = "To tell you how to proceed, the user said:\n"
_SAID_MARK = USER_SAID.rstrip("\n").encode()
# AskUserQuestion's result: the user's answers, their decisions.
ANSWERED_OPENING = "User has answered your questions:"
_ANSWERED_TRAILER = ". You can now continue with the user's answers in mind."
_ANSWERED_MARK = ANSWERED_OPENING.encode()
# Messages typed while the agent was busy wait in a queue; the transcript logs each
# operation on it. "enqueue" holds the text; "dequeue" starts a turn with one (its user line
# follows), "remove" hands one to the agent mid-turn (no user line), "popAll" takes each back
# into the input box (the person may send it again, or not). A background task's start is
# queued too, as JSON.
QUEUE_KIND = "queue-operation"
_QUEUED_TASK = '{"task_id":'
# Queued texts remembered to recognise their user line or their withdrawal.
MAX_QUEUED = 16
# The last this many edit calls can still turn out to have failed (a result follows its
# call, after the other calls of the same response at most).
MAX_PENDING_EDITS = 64
# Past this many edit calls, those that can no longer fail are settled into the files they
# leave (a long input stays bounded).
MAX_TOUCHES = 4096
# A branch with a quote or backslash in its name (escaped in JSON) just does not match here.
_BRANCH_KEY = b'"gitBranch":"'
# TaskCreate's result, the one tool result read here (it gives the task its id): the
# structured result, or its text "Task #N created successfully: …".
_TASK_RESULT_MARKS = (b'"toolUseResult":{"task":', b" created successfully")


class _Record:
    """A value object, as a frozen dataclass would be: made once, then read-only, compared,
    hashed and shown by its fields (``__slots__``, in order)."""

    __slots__: tuple[str, ...] = ()

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[object, ...]:
        # copy and pickle would restore the fields through __setattr__: made anew instead.
        return (_record_make, (type(self), {name: getattr(self, name) for name in self.__slots__}))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")


def _record_make(kind: type[_Record], values: dict[str, object]) -> _Record:
    return kind(**values)


class TodoItem(_Record):
    """One entry of a ``TodoWrite`` list, or one task of Claude Code's task list (its
    subject as the content, and its description); texts clipped to 500 chars."""

    __slots__ = ("active_form", "content", "description", "status")
    content: str
    status: str  # pending | in_progress | completed
    active_form: str
    description: str

    def __init__(
        self, content: str, status: str, active_form: str = "", description: str = ""
    ) -> None:
        self._set(content=content, status=status, active_form=active_form, description=description)


class TranscriptFacts(_Record):
    """What a transcript's tail says about where the session stands.

    ``todos`` is the agent's task list: the task files when there are some, else what the
    transcript's ``TaskCreate``/``TaskUpdate`` calls built, or the latest ``TodoWrite`` list
    when that came last. ``current_task`` is its in_progress item(s), joined by "; " (a
    task with its description), else ``last_user_request``. Prompts come only from what a
    person typed in the main chain (``prompts.prompt_text``: no harness notices, slash
    commands as typed, no local built-ins, no ANSI codes); ``recent_prompts`` holds the last
    10, oldest first, each clipped to 500 chars, and ``last_user_request`` is clipped to 2000.
    A message typed while the agent was busy counts when it was typed (once, though its user
    line may follow), and not when it was taken back; so does what the user typed on
    rejecting a tool call. ``decisions`` are the user's answers to the agent's questions
    (AskUserQuestion), "question → answer", the last 20, newest last, each within 300 chars.
    ``goal`` is the first prompt that can state what the session is for
    (``prompts.goal_worthy``: no greeting or go-ahead), clipped to 2000, and '' unless the read
    began at the file's start. ``last_assistant_message`` is the main agent's last text, its
    start and its last paragraph (its closing question or next step) when it is longer than
    2000 chars. ``compact_summary`` is the latest compaction summary read, clipped to 20,000.
    Files are the last 50 the main agent's edit tools changed, most recent last: a call that
    failed or that the user rejected changed nothing. ``context_tokens`` is the last
    main-chain response's input + cache read + cache creation tokens after the last
    compaction, None when no response followed it. ``truncated`` means only the tail was read.
    """

    current_task: str
    todos: tuple[TodoItem, ...]
    last_user_request: str
    recent_prompts: tuple[str, ...]
    modified_files: tuple[str, ...]
    last_assistant_message: str
    git_branch: str
    model: str
    context_tokens: int | None
    compactions: int
    truncated: bool
    goal: str
    compact_summary: str
    decisions: tuple[str, ...]

    __slots__ = (
        "compact_summary",
        "compactions",
        "context_tokens",
        "current_task",
        "decisions",
        "git_branch",
        "goal",
        "last_assistant_message",
        "last_user_request",
        "model",
        "modified_files",
        "recent_prompts",
        "todos",
        "truncated",
    )

    def __init__(
        self,
        *,
        current_task: str,
        todos: tuple[TodoItem, ...],
        last_user_request: str,
        recent_prompts: tuple[str, ...],
        modified_files: tuple[str, ...],
        last_assistant_message: str,
        git_branch: str,
        model: str,
        context_tokens: int | None,
        compactions: int,
        truncated: bool,
        goal: str = "",
        compact_summary: str = "",
        decisions: tuple[str, ...] = (),
    ) -> None:
        self._set(
            current_task=current_task,
            todos=todos,
            last_user_request=last_user_request,
            recent_prompts=recent_prompts,
            modified_files=modified_files,
            last_assistant_message=last_assistant_message,
            git_branch=git_branch,
            model=model,
            context_tokens=context_tokens,
            compactions=compactions,
            truncated=truncated,
            goal=goal,
            compact_summary=compact_summary,
            decisions=decisions,
        )

    def as_payload(self) -> dict[str, Any]:
        """The facts as JSON values, the shape the server reads from ``signet.transcript``."""
        return {
            "current_task": self.current_task,
            "todos": [
                {
                    "content": todo.content,
                    "status": todo.status,
                    "active_form": todo.active_form,
                    "description": todo.description,
                }
                for todo in self.todos
            ],
            "last_user_request": self.last_user_request,
            "recent_prompts": list(self.recent_prompts),
            "modified_files": list(self.modified_files),
            "last_assistant_message": self.last_assistant_message,
            "git_branch": self.git_branch,
            "model": self.model,
            "context_tokens": self.context_tokens,
            "compactions": self.compactions,
            "truncated": self.truncated,
            "goal": self.goal,
            "compact_summary": self.compact_summary,
            "decisions": list(self.decisions),
        }


def read_transcript(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    loads: Loads | None = None,
    tasks_dir: str | None = None,
) -> TranscriptFacts | None:
    """Facts from the last ``max_bytes`` of the transcript at ``path``, each line parsed with
    ``loads`` (``json.loads`` by default), and the task files in ``tasks_dir`` (the session's
    task list, ``tasks.task_list_dir``), which stand for the list when there are some.

    Returns None when the path is missing, is not a regular file or cannot be read. When the
    file is longer than ``max_bytes`` only its tail is read (``truncated`` is then True) and
    the partial line the cut lands in is dropped.
    """
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    try:
        tail = read_tail(path, max_bytes)
    except (OSError, ValueError):  # ValueError: a path with a NUL byte
        return None
    if tail is None:
        return None
    data, truncated = tail
    files = None if tasks_dir is None else read_task_files(tasks_dir, loads=loads)
    return parse_lines(iter_lines(data), truncated=truncated, loads=loads, task_files=files)


def parse_lines(
    lines: Iterable[str | bytes],
    *,
    truncated: bool = False,
    loads: Loads | None = None,
    task_files: list[tuple[str, str, str, str]] | None = None,
) -> TranscriptFacts:
    """Facts from transcript lines in file order, each parsed with ``loads`` (``json.loads``
    by default); unreadable lines are skipped. ``task_files``: the task list as its files
    hold it (``tasks.read_task_files``), if it has some."""
    if loads is None:
        import json

        loads = json.loads
    reader = _Reader()
    for raw in lines:
        if isinstance(raw, bytes) and is_tool_result(raw) and not reader.wanted(raw):
            reader.branch_hint(raw)
            continue
        record = _decode(raw, loads)
        if record is not None:
            reader.feed(record)
    return reader.facts(truncated=truncated, task_files=task_files)


def _decode(raw: str | bytes, loads: Loads) -> _Json | None:
    if not isinstance(raw, (str, bytes)):
        return None
    line = raw.strip()
    # Cheap rejection of anything that cannot be a JSON object before paying for a parse.
    is_object = line.startswith(b"{") if isinstance(line, bytes) else line.startswith("{")
    if not is_object:
        return None
    try:
        record = loads(line)
    except (ValueError, RecursionError):  # bad JSON, bad UTF-8, absurd nesting
        return None
    return record if isinstance(record, dict) else None


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + "…"


def _text_of(content: object) -> str:
    """A string content, or its ``text`` blocks joined; tool results and images are ignored."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "\n".join(parts)


def typed_text(content: object, limit: int = MESSAGE_CHARS) -> str:
    """What a person typed in a user line's content: each text block cleaned on its own (an
    IDE notice block next to the typed one leaves the typed one), the rest joined; about
    ``limit`` chars are cleaned, the caller clips."""
    if isinstance(content, str):
        return prompt_text(content, limit=limit)
    if not isinstance(content, list):
        return ""
    parts = [
        prompt_text(block["text"], limit=limit)
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "\n".join(part for part in parts if part)


def summary_text(text: str) -> str:
    """A compaction summary as the transcript holds it, without Claude Code's preamble and
    trailer (as PostCompact's ``compact_summary``), clipped to 20,000 chars."""
    _, found, summary = text.partition(_SUMMARY_PREAMBLE)
    summary = (summary if found else text).partition(_SUMMARY_TRAILER)[0]
    return summary.strip()[:SUMMARY_CHARS]


def message_text(text: str, limit: int = MESSAGE_CHARS) -> str:
    """An assistant message within ``limit`` chars: whole when it fits, else its start and
    its last paragraph (where a closing question or next step is) joined by " … "."""
    text = text.strip()
    if len(text) <= limit:
        return strip_ansi(text)
    last = text.rstrip().rpartition("\n\n")[2].strip()
    room = limit // 2
    if len(last) > room:  # a long last paragraph: its end, from a word start
        cut = last[-room:]
        space = cut.find(" ")
        last = cut[space + 1 :] if 0 <= space < room // 4 else cut
    head = text[: limit - len(last) - 3].rstrip()
    return strip_ansi(f"{head} … {last}")


def _todo_items(todos: object) -> tuple[TodoItem, ...] | None:
    if not isinstance(todos, list):
        return None
    items = []
    for todo in todos[:MAX_TODOS]:
        if not isinstance(todo, dict):
            continue
        content, status = todo.get("content"), todo.get("status")
        if not isinstance(content, str) or not isinstance(status, str):
            continue
        active_form = todo.get("activeForm")
        items.append(
            TodoItem(
                content=_clip(content, PROMPT_CHARS),
                status=status,
                active_form=_clip(active_form, PROMPT_CHARS)
                if isinstance(active_form, str)
                else "",
            )
        )
    return tuple(items)


def user_said(line: bytes) -> bool:
    """Whether a raw tool result line may hold what the user said (``rejection_text``,
    ``answer_decisions``): worth a parse."""
    return _ANSWERED_MARK in line or (_SAID_MARK in line and ERROR_MARK in line)


def rejection_text(block: dict[str, Any]) -> str:
    """What the user typed on rejecting the call that a ``tool_result`` block answers, as
    ``prompt_text`` cleans it; '' when the block holds none."""
    said = _text_of(block.get("content"))
    if block.get("is_error") is not True or not said.startswith(REJECTED_OPENING):
        return ""
    return prompt_text(said.partition(USER_SAID)[2], limit=MESSAGE_CHARS)


def answer_decisions(block: dict[str, Any], result: object) -> list[str]:
    """The user's answers to AskUserQuestion in a ``tool_result`` block (and its line's
    ``toolUseResult``), each "question → answer" within DECISION_CHARS."""
    said = _text_of(block.get("content"))
    if not said.startswith(ANSWERED_OPENING):
        return []
    answers = result.get("answers") if isinstance(result, dict) else None
    if not isinstance(answers, dict):  # the text alone: '"question"="answer", …' as one
        text = said[len(ANSWERED_OPENING) :].partition(_ANSWERED_TRAILER)[0]
        return [_clip(" ".join(text.split()), DECISION_CHARS)] if text.strip() else []
    return [
        _decision(question, answer)
        for question, answer in answers.items()
        if isinstance(question, str) and isinstance(answer, str) and answer.strip()
    ]


def _decision(question: str, answer: str) -> str:
    """An answer to the agent's question as one line within DECISION_CHARS: the question cut
    to leave the answer room."""
    question, answer = " ".join(question.split()), " ".join(answer.split())
    answer = _clip(answer, DECISION_CHARS * 2 // 3)
    room = DECISION_CHARS - len(answer) - 3
    return f"{_clip(question, room)} → {answer}" if question else answer


def result_mark(tool_id: str) -> bytes:
    """How the result of call ``tool_id`` names it, bare-quoted as only a key can be."""
    return f'"tool_use_id":"{tool_id}"'.encode()


class _Reader:
    """Running state over the lines; holds only the facts, never the lines."""

    def __init__(self) -> None:
        self.todos: tuple[TodoItem, ...] = ()
        self.tasks = TaskTracker()
        # Which of the two to-do tools the agent used last: "TodoWrite" or "Task".
        self.todo_tool = ""
        # What a person typed, each clipped to MESSAGE_CHARS, oldest first: the last
        # MAX_PROMPTS, and as many more as queued ones taken back could remove.
        self.prompts: list[str] = []
        self.goal = ""
        self.goal_queued = False  # the goal is a queued message, still in the queue
        self.compact_summary = ""
        self.decisions: dict[str, None] = {}  # in order, newest last
        # Queued messages counted when typed (the last MAX_QUEUED); and whether the queue
        # started a turn, whose user line then is one of them.
        self.queued: list[str] = []
        self.dequeued = False
        # The edit calls in file order, (path, tool id), and the ids of those that failed.
        self.touches: list[tuple[str, str]] = []
        self.failed: set[str] = set()
        # The last edit calls, whose result can still say they failed: the mark of the
        # result's id -> id. (A result that did not fail is skipped unparsed: it stays here.)
        self.edits: dict[bytes, str] = {}
        self.last_assistant_message = ""
        self.git_branch = ""
        self.model = ""
        self.usage = UsageTracker()
        self.compactions = 0

    def feed(self, record: _Json) -> None:
        sidechain = record.get("isSidechain", False)
        if not isinstance(sidechain, bool):
            return
        branch = record.get("gitBranch")
        # The branch belongs to the working tree, not the agent, so subagent lines count too.
        if isinstance(branch, str) and branch:
            self.git_branch = branch
        # Subagents (sidechains) have their own context, model and prompts, and their edits
        # are the delegated task's business: the main agent's working set is what we recover.
        if sidechain:
            return
        kind = record.get("type")
        if kind == "assistant":
            self._assistant(record)
        elif kind == "user":
            self._user(record)
        elif kind == QUEUE_KIND:
            self._queue(record)
        elif kind == "system" and record.get("subtype") == "compact_boundary":
            self.compactions += 1
            self.usage.compacted()
        # "summary" (legacy), "file-history-snapshot" and bookkeeping lines carry nothing here.

    def branch_hint(self, line: bytes) -> None:
        """Take the branch from a line that is skipped without parsing: the first
        ``"gitBranch":"<name>"`` whose name holds neither a quote nor a backslash."""
        start = line.find(_BRANCH_KEY)
        while start >= 0:
            begin = start + len(_BRANCH_KEY)
            end = line.find(b'"', begin)
            if end < 0:
                return
            name = line[begin:end]
            if name and b"\\" not in name:
                self.git_branch = name.decode("utf-8", "replace")
                return
            start = line.find(_BRANCH_KEY, start + 1)

    def wanted(self, line: bytes) -> bool:
        """Whether a tool result's line, skipped unparsed otherwise, may say something read
        here (then it is parsed to be sure): a task's creation, the user's answers, the text
        the user typed on rejecting a call, or the failure of an edit call."""
        if any(mark in line for mark in _TASK_RESULT_MARKS) or _ANSWERED_MARK in line:
            return True
        if ERROR_MARK not in line:
            return False
        return _SAID_MARK in line or any(mark in line for mark in self.edits)

    def _prompt(self, text: str, *, queued: bool = False) -> None:
        if not self.goal and goal_worthy(text):
            self.goal = _clip(text, MESSAGE_CHARS)
            self.goal_queued = queued
        self.prompts.append(_clip(text, MESSAGE_CHARS))
        if len(self.prompts) > MAX_PROMPTS + MAX_QUEUED:
            del self.prompts[0]

    def _queue(self, record: _Json) -> None:
        operation = record.get("operation")
        if operation == "dequeue":
            self.dequeued = True
            return
        if operation not in ("enqueue", "popAll"):
            return  # "remove": the agent got it mid-turn, as counted
        content = record.get("content")
        if isinstance(content, str) and content.startswith(_QUEUED_TASK):
            return  # a background task's start
        text = typed_text(content)
        if not text:
            return
        if operation == "enqueue":
            self._prompt(text, queued=True)
            self.queued.append(text)
            if len(self.queued) > MAX_QUEUED:
                del self.queued[0]
        elif text in self.queued:  # taken back into the input box
            self.queued.remove(text)
            clipped = _clip(text, MESSAGE_CHARS)
            for index in range(len(self.prompts) - 1, -1, -1):
                if self.prompts[index] == clipped:
                    del self.prompts[index]
                    break
            if self.goal_queued and self.goal == clipped:
                self.goal = ""

    def _results(self, content: list[Any], result: object) -> None:
        """What the user said in tool results: the text typed on rejecting a call (a
        prompt), the answers to the agent's questions (decisions)."""
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            typed = rejection_text(block)
            if typed:
                self._prompt(typed)
            for decision in answer_decisions(block, result):
                self.decisions.pop(decision, None)
                self.decisions[decision] = None
        while len(self.decisions) > MAX_DECISIONS:
            del self.decisions[next(iter(self.decisions))]

    def _user(self, record: _Json) -> None:
        message = record.get("message")
        if not isinstance(message, dict):
            return
        content = message.get("content")
        if record.get("isCompactSummary") is True:
            self.compact_summary = summary_text(_text_of(content))
            return
        if record.get("isMeta") is True or record.get("isVisibleInTranscriptOnly") is True:
            return
        if isinstance(content, list):
            result = record.get("toolUseResult")
            if self.tasks.creating:
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        self.tasks.tool_result(block, result)
            if self.edits:
                self._edit_results(content)
            self._results(content, result)
        text = typed_text(content)
        dequeued, self.dequeued = self.dequeued, False
        if not text:
            raw = _text_of(content)
            if raw.lstrip().startswith(SUMMARY_OPENING):  # a summary line without its flag
                self.compact_summary = summary_text(raw)
            return
        if dequeued and text in self.queued:  # counted when it was queued
            self.queued.remove(text)
            if self.goal == _clip(text, MESSAGE_CHARS):
                self.goal_queued = False  # sent: no longer to be taken back
            return
        self._prompt(text)

    def _edit_results(self, content: list[Any]) -> None:
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            if not isinstance(tool_id, str) or self.edits.pop(result_mark(tool_id), None) is None:
                continue
            if block.get("is_error") is True:  # failed, or the user said no
                self.failed.add(tool_id)

    def _assistant(self, record: _Json) -> None:
        message = record.get("message")
        if not isinstance(message, dict):
            return
        model = message.get("model")
        if model == SYNTHETIC_MODEL:
            return
        if isinstance(model, str) and model:
            self.model = model
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    self._block(block)
        self.usage.response(record, message)

    def _block(self, block: _Json) -> None:
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str) and text.strip():
                self.last_assistant_message = text  # clipped once, at the end
            return
        if kind != "tool_use":
            return
        name, tool_input = block.get("name"), block.get("input")
        if not isinstance(name, str) or not isinstance(tool_input, dict):
            return
        if name == "TodoWrite":
            todos = _todo_items(tool_input.get("todos"))
            if todos is not None:
                self.todos = todos
                self.todo_tool = name
        elif self.tasks.tool_use(name, block.get("id"), tool_input):
            self.todo_tool = "Task"
        elif name in EDIT_TOOLS:
            path = tool_input.get(EDIT_TOOLS[name])
            tool_id = block.get("id")
            if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
                return
            tool_id = tool_id if isinstance(tool_id, str) else ""
            self.touches.append((path, tool_id))
            if tool_id:
                self.edits[result_mark(tool_id)] = tool_id
                if len(self.edits) > MAX_PENDING_EDITS:
                    del self.edits[next(iter(self.edits))]
            if len(self.touches) > MAX_TOUCHES:
                self._settle()

    def _settle(self) -> None:
        """Keep the touches that can still fail, and of the older ones the files they leave."""
        recent = self.touches[-MAX_PENDING_EDITS:]
        older = self._files(self.touches[:-MAX_PENDING_EDITS])
        self.touches = [(path, "") for path in older] + recent

    def _files(self, touches: list[tuple[str, str]]) -> tuple[str, ...]:
        """The last MAX_MODIFIED_FILES files the touches changed, in order of last touch."""
        files: dict[str, None] = {}
        for path, tool_id in reversed(touches):
            if tool_id not in self.failed and path not in files:
                files[path] = None
                if len(files) == MAX_MODIFIED_FILES:
                    break
        return tuple(reversed(files))

    def facts(
        self, *, truncated: bool, task_files: list[tuple[str, str, str, str]] | None = None
    ) -> TranscriptFacts:
        todos = self.todos
        if task_files or self.todo_tool == "Task":
            tasks = task_files or self.tasks.items()
            todos = tuple(TodoItem(*task) for task in tasks[:MAX_TODOS])
        doing = current_task([(t.content, t.status, t.active_form, t.description) for t in todos])
        last_request = self.prompts[-1] if self.prompts else ""
        return TranscriptFacts(
            current_task=doing or last_request,
            todos=todos,
            last_user_request=last_request,
            recent_prompts=tuple(_clip(p, PROMPT_CHARS) for p in self.prompts[-MAX_PROMPTS:]),
            modified_files=self._files(self.touches),
            last_assistant_message=message_text(self.last_assistant_message),
            git_branch=self.git_branch,
            model=self.model,
            context_tokens=self.usage.context_tokens,
            compactions=self.compactions,
            truncated=truncated,
            goal="" if truncated else self.goal,
            compact_summary=self.compact_summary,
            decisions=tuple(self.decisions),
        )
