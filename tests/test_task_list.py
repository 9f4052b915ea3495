"""Claude Code's task list (TaskCreate/TaskUpdate and its task files): what the hook client
reads of it, and the task in progress in the checkpoints and the recovery context; and the
Stop hook's wait for the turn's last response before it reads the usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoints.models import Checkpoint, Session, Trigger
from hooks import signet_hook
from hooks.transcripts.claude_code import TodoItem, parse_lines, read_transcript
from hooks.transcripts.tasks import (
    TASK_FILE_MAX_BYTES,
    read_task_files,
    task_list_dir,
)
from hooks.transcripts.usage import read_usage_after
from tests.hookutil import configure, context_of, payload, send
from tests.test_transcripts import assistant, dump, tool_use, user

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
VAT = "Add VAT breakdown to invoice PDF"


def task_create(block_id: str, subject: str, description: str = "", active: str = "") -> str:
    block = {
        "type": "tool_use",
        "id": block_id,
        "name": "TaskCreate",
        "input": {"subject": subject, "description": description, "activeForm": active},
    }
    return assistant([block], msg_id=f"msg_{block_id}", request_id=f"req_{block_id}")


def created(block_id: str, task_id: str, subject: str, *, structured: bool = True) -> str:
    """TaskCreate's result as Claude Code 2.1.197 writes it."""
    result = {"task": {"id": task_id, "subject": subject}} if structured else {}
    return user(
        [
            {
                "tool_use_id": block_id,
                "type": "tool_result",
                "content": f"Task #{task_id} created successfully: {subject}",
            }
        ],
        toolUseResult=result,
    )


def task_update(task_id: str, **fields: str) -> str:
    return assistant([tool_use("TaskUpdate", {"taskId": task_id, **fields})])


def three_tasks() -> list[str]:
    return [
        user("Add the VAT breakdown to the invoice PDF"),
        task_create("t1", "Read invoice model", "Look at invoice.py", "Reading"),
        task_create("t2", VAT, "Per-rate VAT lines", "Adding VAT breakdown"),
        task_create("t3", "Write tests for VAT", "", "Writing tests"),
        created("t1", "1", "Read invoice model"),
        created("t2", "2", VAT),
        created("t3", "3", "Write tests for VAT", structured=False),
        task_update("1", status="completed"),
        task_update("2", status="in_progress"),
    ]


# --- the reader ------------------------------------------------------------------------------


def test_the_task_in_progress_is_the_current_task_and_the_list_its_todos():
    facts = parse_lines([line.encode() for line in three_tasks()])

    assert facts.current_task == f"{VAT}: Per-rate VAT lines"
    assert facts.todos == (
        TodoItem("Read invoice model", "completed", "Reading", "Look at invoice.py"),
        TodoItem(VAT, "in_progress", "Adding VAT breakdown", "Per-rate VAT lines"),
        TodoItem("Write tests for VAT", "pending", "Writing tests"),
    )
    assert facts.last_user_request == "Add the VAT breakdown to the invoice PDF"


def test_updates_rename_delete_and_stand_in_for_tasks_created_before_the_tail():
    lines = [
        *three_tasks(),
        task_update("3", status="deleted"),
        task_update("1", subject="Read the invoice model"),
        task_update("7", status="in_progress", subject="Ship it"),  # created before the tail
        task_update("8", status="pending"),  # nothing says what it is
    ]

    facts = parse_lines(lines)

    assert [(t.content, t.status) for t in facts.todos] == [
        ("Read the invoice model", "completed"),
        (VAT, "in_progress"),
        ("Ship it", "in_progress"),
    ]
    assert facts.current_task == f"{VAT}: Per-rate VAT lines; Ship it"


def test_a_todowrite_list_after_the_tasks_is_the_list():
    todo = {"content": "Deploy", "status": "in_progress", "activeForm": "Deploying"}
    lines = [*three_tasks(), assistant([tool_use("TodoWrite", {"todos": [todo]})])]

    assert parse_lines(lines).current_task == "Deploy"


def write_task(directory: Path, task_id: str, subject: str, status: str, **more: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    record = {"id": task_id, "subject": subject, "description": "", "activeForm": "", **more}
    (directory / f"{task_id}.json").write_text(json.dumps({**record, "status": status}))


def test_the_task_files_are_the_list_when_there_are_some(tmp_path):
    transcript = tmp_path / "s.jsonl"
    transcript.write_text("\n".join(three_tasks()) + "\n")
    tasks = tmp_path / "tasks" / "s"
    write_task(tasks, "10", "Release", "pending")
    write_task(tasks, "2", VAT, "completed")
    write_task(tasks, "9", "Fix the rounding", "in_progress", description="Half up")
    write_task(tasks, "11", "Gone", "deleted")
    (tasks / ".lock").write_text("")
    (tasks / "12.json").write_text("{not json")
    (tasks / "13.json").write_text(json.dumps({"id": "13", "status": "pending"}))  # no subject
    (tasks / "14.json").write_bytes(b" " * (TASK_FILE_MAX_BYTES + 1))

    facts = read_transcript(transcript, tasks_dir=str(tasks))

    assert facts is not None
    assert [(t.content, t.status) for t in facts.todos] == [
        (VAT, "completed"),
        ("Fix the rounding", "in_progress"),
        ("Release", "pending"),
    ]
    assert facts.current_task == "Fix the rounding: Half up"
    # An empty or missing folder leaves the transcript's list.
    assert read_transcript(transcript, tasks_dir=str(tmp_path / "none")).current_task.startswith(
        VAT
    )
    assert read_task_files(str(tmp_path / "none")) is None


def test_the_task_folder_is_claude_codes():
    assert task_list_dir("s-1", {"HOME": "/home/a"}) == "/home/a/.claude/tasks/s-1"
    environ = {"CLAUDE_CONFIG_DIR": "/etc/cc", "CLAUDE_CODE_TASK_LIST_ID": "team a/b"}
    assert task_list_dir("s-1", environ) == "/etc/cc/tasks/team-a-b"


def test_stop_sends_the_task_files_as_signet_tasks(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CODE_TASK_LIST_ID", raising=False)
    write_task(tmp_path / "tasks" / SESSION, "1", VAT, "in_progress", activeForm="Adding")
    write_task(tmp_path / "tasks" / SESSION, "2", "Write tests", "pending")
    stop = payload("stop")

    sent = signet_hook.tasks_extract(stop)

    assert sent == {
        "current_task": VAT,
        "todos": [
            {"content": VAT, "status": "in_progress", "active_form": "Adding", "description": ""},
            {"content": "Write tests", "status": "pending", "active_form": "", "description": ""},
        ],
    }
    assert signet_hook.tasks_extract(payload("stop", session_id="no-tasks")) is None
    assert signet_hook.tasks_extract(payload("user_prompt_submit")) is None


# --- the service -----------------------------------------------------------------------------

pytest_django = pytest.mark.django_db


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def stop_with_tasks(hook: Any, current: str, *todos: tuple[str, str]) -> None:
    tasks = {"current_task": current, "todos": [{"content": c, "status": s} for c, s in todos]}
    response = send(hook, payload("stop", signet={"tasks": tasks}))
    assert response.status_code == 200, response.content


@pytest_django
def test_the_periodic_checkpoint_and_the_recovery_name_the_task_in_progress(hook, clock):
    configure(prompt_interval=1, debounce_seconds=0)
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="Carry on with the VAT work."))
    stop_with_tasks(
        hook, VAT, ("Read invoice model", "completed"), (VAT, "in_progress"), ("Tests", "pending")
    )
    clock.advance(seconds=5)
    send(hook, payload("user_prompt_submit", prompt="go on"))  # writes the pending checkpoint

    periodic = Checkpoint.objects.get(trigger=Trigger.PERIODIC)
    assert periodic.current_task == VAT
    assert periodic.next_steps == ["Tests"]
    session = Session.objects.get(session_key=SESSION)
    assert (session.current_task, session.next_steps) == (VAT, ["Tests"])

    recovered = context_of(send(hook, payload("session_start_compact")))
    assert VAT in recovered
    assert "Tests" in recovered


@pytest_django
def test_a_checkpoint_of_its_own_keeps_its_task(hook):
    send(hook, payload("user_prompt_submit", prompt="Carry on"))
    stop_with_tasks(hook, VAT, (VAT, "in_progress"))
    facts = {"current_task": "Fix the build", "todos": [], "recent_prompts": ["Carry on"]}
    body = payload("pre_compact_auto", signet={"transcript": facts})
    assert send(hook, body).status_code == 200

    assert Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION).current_task == "Fix the build"


@pytest_django
@pytest.mark.parametrize(
    ("tasks", "problem"),
    [
        ("lots", "'signet.tasks' must be an object."),
        ({"todos": "x"}, "'signet.tasks.todos' must be a list of {content, status} objects."),
        ({"current_task": 3}, "'signet.tasks.current_task' must be a string, not int."),
    ],
)
def test_a_bad_task_list_is_refused(hook, tasks, problem):
    response = send(hook, payload("stop", signet={"tasks": tasks}))

    assert response.status_code == 400
    assert problem in str(response.json())


# --- Stop waits for the turn's last response -------------------------------------------------


class Steps:
    """A clock that moves on at each sleep, and a transcript that grows at given sleeps."""

    def __init__(self, path: Path, later: dict[int, list[str]]) -> None:
        self.path, self.later, self.now, self.sleeps = path, later, 0.0, 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        with self.path.open("a") as handle:
            for line in self.later.get(self.sleeps, []):
                handle.write(line + "\n")


def response(text: str, tokens: int, msg: str) -> str:
    return assistant(
        [{"type": "text", "text": text}], msg_id=msg, request_id=f"r{msg}", tokens=(1, tokens, 0)
    )


def turn(prompt_id: str, text: str) -> str:
    return user(text, promptId=prompt_id)


def test_stop_waits_until_the_transcript_holds_the_last_response(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join([turn("p1", "first"), response("Done.", 20_000, "m1"), turn("p2", "again")])
        + "\n"
    )
    # The same words as the previous turn's answer: only what follows the turn's prompt counts.
    steps = Steps(path, {3: [response("Done.", 31_000, "m2")]})

    usage = read_usage_after(
        path, response="Done.", prompt_id="p2", clock=steps.clock, sleep=steps.sleep
    )

    assert usage == {"context_tokens": 31_001, "model": "claude-sonnet-4-6"}
    assert steps.sleeps == 3


def test_stop_waits_a_bounded_time_then_reads_what_there_is(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(turn("p1", "go") + "\n" + response("Working.", 20_000, "m1") + "\n")
    steps = Steps(path, {})

    usage = read_usage_after(
        path, response="All done.", prompt_id="p1", wait=0.3, clock=steps.clock, sleep=steps.sleep
    )

    assert usage == {"context_tokens": 20_001, "model": "claude-sonnet-4-6"}
    assert 0.3 <= steps.now < 0.35
    # No text to wait for, or the response already there: no wait at all.
    for text in ("", "Working."):
        quick = Steps(path, {})
        read_usage_after(path, response=text, prompt_id="p1", clock=quick.clock, sleep=quick.sleep)
        assert quick.sleeps == 0


def test_without_the_prompt_line_the_text_alone_decides(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(dump({"type": "queue-operation"}) + "\n")
    steps = Steps(path, {2: [response("Fixed it.", 40_000, "m1")]})

    usage = read_usage_after(
        path, response="Fixed it.", prompt_id="p9", clock=steps.clock, sleep=steps.sleep
    )

    assert usage == {"context_tokens": 40_001, "model": "claude-sonnet-4-6"}
