"""Claude Code's task list: what the agent says it is doing, and what it has left to do.

Claude Code 2.1.x gives the agent ``TaskCreate``/``TaskUpdate`` (``TodoWrite`` only with
``CLAUDE_CODE_ENABLE_TASKS=false``). The list is kept on disk, one file per task,
``<config>/tasks/<list>/<id>.json`` (``{"id", "subject", "description", "activeForm",
"status", ...}``; the list is the session id unless ``CLAUDE_CODE_TASK_LIST_ID`` names a
shared one), and the transcript holds the calls: TaskCreate's ``subject``, ``description``
and ``activeForm``, whose result gives the id (``toolUseResult.task.id``, and the text
``Task #N created successfully: …``), then TaskUpdate's ``taskId``, ``status``
(``pending|in_progress|completed|deleted``) and any field it changes.

The files are the list as it stands; the transcript is the fallback when there are none
(another machine's transcript, an imported one). Both are read on the agent's machine, by
the hook client, within bounds: at most ``MAX_TASKS`` files of at most
``TASK_FILE_MAX_BYTES`` each. Nothing here raises for I/O errors or bad content.

Standard library, and only what the hook has loaded: Stop reads the files after every turn.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    Loads = Callable[[Any], Any]
    # (subject, status, active form, description), in the list's order.
    Task = tuple[str, str, str, str]

MAX_TASKS = 100
TASK_FILE_MAX_BYTES = 64 * 1024
TEXT_CHARS = 500
CURRENT_TASK_CHARS = 2000
DELETED = "deleted"
IN_PROGRESS = "in_progress"

_CREATED_PREFIX = "Task #"
_CREATED_MARK = " created successfully"
_LIST_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + "…"


def task_list_dir(session_id: str, environ: Mapping[str, str] | None = None) -> str:
    """Where Claude Code keeps the session's task files: its config folder
    (``CLAUDE_CONFIG_DIR``, else ``$HOME/.claude``), ``tasks``, and the list's id with any
    character but letters, digits, ``_`` and ``-`` made a ``-``, as Claude Code names it."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    config = env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    list_id = env.get("CLAUDE_CODE_TASK_LIST_ID") or session_id
    name = "".join(char if char in _LIST_ID_CHARS else "-" for char in list_id)
    return os.path.join(config, "tasks", name)


def _order(name: str) -> tuple[int, int, str]:
    stem = name[: -len(".json")]
    return (0, int(stem), "") if stem.isdigit() and len(stem) < 10 else (1, 0, stem)


def read_task_files(directory: str, *, loads: Loads | None = None) -> list[Task] | None:
    """The tasks in ``directory``, in id order, deleted ones left out; None when there is no
    such folder. A file that cannot be read or is not a task is skipped."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".json") and n[:1] != "."]
    except (OSError, ValueError):  # ValueError: a path with a NUL byte
        return None
    if loads is None:
        import json

        loads = json.loads
    tasks: list[Task] = []
    for name in sorted(names, key=_order)[:MAX_TASKS]:
        record = _read_record(os.path.join(directory, name), loads)
        task = _task_of(record) if isinstance(record, dict) else None
        if task is not None and task[1] != DELETED:
            tasks.append(task)
    return tasks


def _read_record(path: str, loads: Loads) -> object:
    nonblock = getattr(os, "O_NONBLOCK", 0)  # a FIFO must not hang the hook
    try:
        fd = os.open(path, os.O_RDONLY | nonblock)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, TASK_FILE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > TASK_FILE_MAX_BYTES:
        return None
    try:
        return loads(data)
    except (ValueError, RecursionError):
        return None


def _text(value: object, limit: int = TEXT_CHARS) -> str:
    return clip(value, limit) if isinstance(value, str) else ""


def _task_of(record: dict[str, Any]) -> Task | None:
    subject, status = _text(record.get("subject")), record.get("status")
    if not subject or not isinstance(status, str):
        return None
    return (subject, status, _text(record.get("activeForm")), _text(record.get("description")))


def current_task(tasks: list[Task] | tuple[Task, ...]) -> str:
    """The in-progress tasks, each its subject and description, joined by "; " ('' for
    none)."""
    doing = [
        f"{subject}: {description}" if description and description != subject else subject
        for subject, status, _, description in tasks
        if status == IN_PROGRESS
    ]
    return clip("; ".join(doing), CURRENT_TASK_CHARS)


def tasks_payload(tasks: list[Task]) -> dict[str, Any]:
    """What the client sends as ``signet.tasks``: the current task and the list."""
    return {
        "current_task": current_task(tasks),
        "todos": [
            {"content": subject, "status": status, "active_form": active, "description": text}
            for subject, status, active, text in tasks
        ],
    }


class TaskTracker:
    """The task list as the transcript's Task calls built it, fed in file order."""

    def __init__(self) -> None:
        # id -> [subject, status, active form, description], in creation order.
        self.tasks: dict[str, list[str]] = {}
        # A TaskCreate's tool_use id -> its task, until its result gives the id.
        self.creating: dict[str, list[str]] = {}

    def tool_use(self, name: str, block_id: object, tool_input: dict[str, Any]) -> bool:
        """One ``tool_use`` block; True when it was a Task call."""
        if name == "TaskCreate":
            subject = _text(tool_input.get("subject"))
            if subject and isinstance(block_id, str):
                self.creating[block_id] = [
                    subject,
                    "pending",
                    _text(tool_input.get("activeForm")),
                    _text(tool_input.get("description")),
                ]
                if len(self.creating) > MAX_TASKS:
                    del self.creating[next(iter(self.creating))]
            return True
        if name != "TaskUpdate":
            return False
        task_id = tool_input.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            return True
        status = tool_input.get("status")
        if status == DELETED:
            self.tasks.pop(task_id, None)
            return True
        # A task created before the tail began is known by what its updates say.
        task = self.tasks.get(task_id) or ["", "pending", "", ""]
        for index, field in ((0, "subject"), (2, "activeForm"), (3, "description")):
            value = _text(tool_input.get(field))
            if value:
                task[index] = value
        if isinstance(status, str) and status:
            task[1] = status
        self._keep(task_id, task)
        return True

    def tool_result(self, block: dict[str, Any], result: object) -> bool:
        """One ``tool_result`` block of a user line (``result``: the line's
        ``toolUseResult``); True when it gave a TaskCreate its id."""
        task = self.creating.pop(block.get("tool_use_id"), None)  # type: ignore[arg-type]
        if task is None:
            return False
        task_id = _created_id(block.get("content"), result)
        if task_id:
            self._keep(task_id, task)
        return bool(task_id)

    def _keep(self, task_id: str, task: list[str]) -> None:
        self.tasks[task_id] = task
        if len(self.tasks) > MAX_TASKS:
            del self.tasks[next(iter(self.tasks))]

    def items(self) -> list[Task]:
        """The tasks, those whose subject the tail never showed left out."""
        return [(s, st, a, d) for s, st, a, d in self.tasks.values() if s]


def _created_id(content: object, result: object) -> str:
    """The id a TaskCreate's result gives: ``toolUseResult.task.id``, else the N of its
    text ``Task #N created successfully: …``."""
    task = result.get("task") if isinstance(result, dict) else None
    task_id = task.get("id") if isinstance(task, dict) else None
    if isinstance(task_id, str) and task_id:
        return task_id
    if isinstance(content, list):
        content = next(
            (b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"),
            "",
        )
    if not isinstance(content, str) or not content.startswith(_CREATED_PREFIX):
        return ""
    number, mark, _ = content[len(_CREATED_PREFIX) :].partition(_CREATED_MARK)
    return number if mark and number.isdigit() else ""
