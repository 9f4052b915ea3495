"""The real Claude Code CLI (``tests/claude_cli.py``) against the real service: the task in
progress reaches the recovery context, the usage kept after each turn is the turn's last
response, and a headless session on a 1M model is not reminded at 75 % of 200k."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checkpoints.models import Checkpoint, Session, Trigger
from hooks.transcripts.usage import context_size
from tests.hookutil import configure
from tests.model_api import ModelAPI, text, tool_use

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VAT = "Add VAT breakdown to invoice PDF"
RECOVERY = "## Session Recovery Context"


def task(subject: str, description: str, active: str) -> dict[str, Any]:
    return tool_use(
        "TaskCreate", {"subject": subject, "description": description, "activeForm": active}
    )


def test_the_task_in_progress_reaches_the_model_after_a_compaction(claude, model_api):
    configure(prompt_interval=1, debounce_seconds=0)  # a periodic checkpoint every prompt
    model_api.script.append([
        text("Planning the VAT work."),
        task("Read invoice model", "Look at invoice.py fields", "Reading invoice model"),
        task(VAT, "Per-rate VAT lines in the PDF totals", "Adding VAT breakdown"),
        task("Write tests for VAT", "pytest for the breakdown", "Writing VAT tests"),
    ])  # fmt: skip
    model_api.script.append([
        tool_use("TaskUpdate", {"taskId": "1", "status": "completed"}),
        tool_use("TaskUpdate", {"taskId": "2", "status": "in_progress"}),
    ])  # fmt: skip
    model_api.script.append([text("Working on the VAT breakdown now.")])

    first = claude.run("Carry on with the VAT work.")
    assert first.returncode == 0, first.stderr
    sid = first.session_id
    tasks = claude.home / ".claude" / "tasks" / sid
    assert json.loads((tasks / "2.json").read_text())["status"] == "in_progress"

    compacted = claude.run("/compact", "--resume", sid)
    assert compacted.returncode == 0, compacted.stderr
    after_compaction = len(model_api.requests)
    model_api.script.append([text("Continuing.")])
    after = claude.run("Go on.", "--resume", sid)
    assert after.returncode == 0, after.stderr

    checkpoint = Checkpoint.objects.get(session__session_key=sid, trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.current_task.startswith(VAT)
    assert checkpoint.next_steps == ["Write tests for VAT"]
    session = Session.objects.get(session_key=sid)
    assert session.current_task.startswith(VAT)  # from the Stop hook
    periodic = Checkpoint.objects.filter(session=session, trigger=Trigger.PERIODIC)
    assert periodic.latest("created_at").current_task.startswith(VAT)
    shown = ModelAPI.request_text(model_api.requests[after_compaction]["body"])
    recovery = shown[shown.index(RECOVERY) :]
    sections = recovery.split("\n\n")
    assert sections[1] == "### Goal\nCarry on with the VAT work."  # what the session is for
    assert sections[2].startswith(f"### Now\n{VAT}")  # the task in progress, not the prompt


def last_response_tokens(claude: Any, session_id: str) -> int:
    """The context size of the transcript's last main-chain response, as written."""
    tokens = None
    for line in claude.transcript(session_id).read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "assistant" and not record.get("isSidechain"):
            size = context_size(record["message"].get("usage"))
            if size is not None and record["message"].get("model") != "<synthetic>":
                tokens = size
    assert tokens is not None
    return tokens


def test_the_usage_kept_after_each_turn_is_its_last_response(claude, model_api):
    model_api.usage.step = 7_000  # every response a larger context: one behind shows
    kept, written = [], []
    session_id = ""
    for turn in range(4):
        model_api.script.append(
            [text(f"Looking, step {turn}."), tool_use("Bash", {"command": "true"})]
        )
        model_api.script.append([text(f"Step {turn} done.")])
        resume = ("--resume", session_id) if session_id else ()
        run = claude.run(f"Do step {turn}", *resume)
        assert run.returncode == 0, run.stderr
        session_id = run.session_id
        kept.append(Session.objects.get(session_key=session_id).context_tokens)
        written.append(last_response_tokens(claude, session_id))

    assert kept == written


def test_a_headless_session_on_a_1m_model_is_not_reminded_at_75_percent_of_200k(claude, model_api):
    model_api.model = "claude-opus-4-8"  # what the API answers for the CLI's default model
    model_api.usage.cache_read_input_tokens = 150_000
    model_api.usage.step = 30_000  # 150k, 180k, 210k, 240k: past 75 % and 100 % of 200k
    session_id = ""
    for turn in range(4):
        model_api.script.append([text(f"Turn {turn} done.")])
        resume = ("--resume", session_id) if session_id else ()
        run = claude.run(f"Turn {turn}", *resume)
        assert run.returncode == 0, run.stderr
        session_id = run.session_id

    shown = "\n".join(ModelAPI.request_text(body) for body in model_api.conversation_requests())
    assert "Context warning:" not in shown
    assert "Context critical:" not in shown
    session = Session.objects.get(session_key=session_id)
    assert session.context_window == 1_000_000
    assert session.context_tokens is not None
    assert session.context_tokens > 200_000
