"""What recovery carries, end to end through the hook URL and the API: the notes, the last
message, the compaction summary and the agent's narrative, which later passive checkpoints
keep; memory queries without duplicates; redaction on every new section."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from checkpoints.models import Checkpoint, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.recovery import recovery_find
from tests.hookutil import TRANSCRIPT, client_read, context_of, payload, send

pytestmark = pytest.mark.django_db

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
PROJECT = "/home/alice/projects/webapp"
UNREADABLE = "/nonexistent/t.jsonl"  # the client cannot read it: no transcript facts
NARRATIVE = {
    "session_key": SESSION,
    "project": PROJECT,
    "trigger": "agent",
    "current_task": "Move the login limiter's counters to Redis",
    "decisions": ["Fixed window, 5 attempts per IP per 15 minutes"],
    "open_questions": ["Should admins bypass the limit?"],
    "blockers": ["CI runner lacks Redis"],
    "next_steps": ["Run the auth tests against a real Redis"],
}


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest", "write", "read")


def prompt(hook, text, session=SESSION):
    response = send(hook, payload("user_prompt_submit", prompt=text, session_id=session))
    assert response.status_code == 200, response.content
    return response


def digest(hook, **fields):
    response = hook.post(
        "/api/checkpoints/",
        data=json.dumps({**NARRATIVE, **fields}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return response


def compact(hook, clock, transcript=UNREADABLE):
    """PreCompact, PostCompact, then SessionStart(compact): the injection it gets."""
    send(hook, client_read(payload("pre_compact_auto", transcript_path=str(transcript))))
    clock.advance(seconds=1)
    send(hook, payload("post_compact_manual"))
    clock.advance(seconds=1)
    return context_of(send(hook, payload("session_start_compact")))


def todo_transcript(tmp_path, settings, todos):
    """A readable transcript whose last TodoWrite holds ``todos`` (content, status)."""
    lines = [
        {
            "type": "user",
            "isSidechain": False,
            "message": {"role": "user", "content": "Add rate limiting to POST /api/login"},
        },
        {
            "type": "assistant",
            "isSidechain": False,
            "requestId": "r1",
            "message": {
                "id": "m1",
                "model": "claude-sonnet-4-6",
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "TodoWrite",
                        "input": {
                            "todos": [
                                {"content": c, "status": s, "activeForm": c} for c, s in todos
                            ]
                        },
                    }
                ],
            },
        },
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_after_compact_one_injection_holds_task_todo_steps_decisions_files_and_note(
    hook, clock, tmp_path, settings
):
    """The issue's scripted session: what the agent needs after ``/compact``."""
    send(hook, payload("session_start_startup"))
    prompt(hook, "Add rate limiting to POST /api/login")
    digest(hook)
    clock.advance(minutes=1)
    send(hook, payload("post_tool_use_edit"))
    prompt(hook, "# the staging Redis listens on port 6380")
    send(hook, payload("stop"))
    transcript = todo_transcript(
        tmp_path,
        settings,
        [
            ("Write the limiter middleware", "completed"),
            ("Switch the counter store to Redis", "in_progress"),
            ("Document REDIS_URL", "pending"),
        ],
    )
    context = compact(hook, clock, transcript)
    # What the session is for, then the to-do in progress; the only request is the goal.
    assert context.index("### Goal\nAdd rate limiting to POST /api/login") < context.index(
        "### Now\nSwitch the counter store to Redis"
    )
    assert "### Latest request" not in context
    assert "### Next steps\n- Document REDIS_URL" in context  # the pending todo
    assert "- Fixed window, 5 attempts per IP per 15 minutes" in context
    assert "- Blocker: CI runner lacks Redis" in context
    assert "### Modified files\n- src/routes/auth.ts" in context  # relative to the project
    assert "### Remembered notes\n- the staging Redis listens on port 6380" in context
    assert "> Rate limiting is in place" in context  # the Stop hook's last message
    # The compacted conversation holds its summary already: not again for this session.
    assert "### Compaction summary" not in context


def test_a_new_session_gets_the_previous_ones_compaction_summary(hook, clock):
    prompt(hook, "Add rate limiting to POST /api/login")
    compact(hook, clock)
    send(hook, payload("session_end"))
    clock.advance(minutes=5)
    context = context_of(send(hook, payload("session_start_startup", session_id="next")))
    assert "checkpoint of an earlier session in this project (`3f2b8c1e-" in context
    assert "### Compaction summary\n> The user asked for rate limiting on POST /api/login." in (
        context
    )


def test_the_compaction_summary_costs_no_extra_query(owner, hook, clock, django_assert_num_queries):
    prompt(hook, "Add rate limiting to POST /api/login")
    compact(hook, clock)
    session = Session(owner=owner, session_key="", project_normalized=PROJECT)
    config = config_get()
    # 1. this session's own latest checkpoint (none), 2. the project's latest, with its
    # session's summary joined in
    with django_assert_num_queries(2):
        match = recovery_find(owner=owner, session=session, config=config, now=timezone.now())
    assert match is not None
    assert match.match == "project"
    assert match.compact_summary.startswith("The user asked for rate limiting")


def test_the_agents_narrative_survives_two_prompts_and_a_compaction(hook, clock):
    prompt(hook, "Add rate limiting to POST /api/login")
    digest(hook)
    prompt(hook, "go on")
    prompt(hook, "and the signup route too")
    context = compact(hook, clock)  # no transcript: the pre-compaction has only the session
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.current_task == NARRATIVE["current_task"]
    assert checkpoint.next_steps == NARRATIVE["next_steps"]
    assert checkpoint.decisions == NARRATIVE["decisions"]
    assert checkpoint.open_questions == NARRATIVE["open_questions"]
    assert checkpoint.blockers == NARRATIVE["blockers"]
    assert "### Goal\nAdd rate limiting to POST /api/login" in context
    assert "### Now\nMove the login limiter's counters to Redis" in context
    assert "### Latest request\nand the signup route too" in context
    assert "- Run the auth tests against a real Redis" in context


def test_the_narrative_carries_through_several_passive_checkpoints(hook, clock):
    prompt(hook, "Add rate limiting to POST /api/login")
    digest(hook)
    for number in range(3):
        prompt(hook, f"step {number}")
        send(hook, payload("post_tool_use_write"))
        send(hook, payload("session_end"))  # a session-end checkpoint each time
        send(hook, payload("session_start_resume"))
    passive = Checkpoint.objects.filter(trigger=Trigger.SESSION_END).order_by("created_at")
    assert passive.count() == 3
    for checkpoint in passive:
        assert checkpoint.current_task == NARRATIVE["current_task"]
        assert checkpoint.next_steps == NARRATIVE["next_steps"]


def test_a_later_narrative_replaces_the_earlier_one(hook, clock):
    digest(hook)
    prompt(hook, "go on")
    digest(hook, current_task="Rate limit the signup route", decisions=["Share the limiter"])
    prompt(hook, "go on")
    compact(hook, clock)
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.current_task == "Rate limit the signup route"
    assert checkpoint.decisions == ["Share the limiter"]
    assert checkpoint.next_steps == NARRATIVE["next_steps"]  # the later one named none


def test_todos_replace_the_agents_task_and_go_before_its_steps_a_bare_request_does_not(
    hook, clock, tmp_path, settings
):
    digest(hook)
    prompt(hook, "go on")
    compact(hook, clock, TRANSCRIPT)  # no todos: its task is only the last request
    bare = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert bare.current_task == NARRATIVE["current_task"]
    assert bare.next_steps == NARRATIVE["next_steps"]
    prompt(hook, "go on")
    transcript = todo_transcript(
        tmp_path, settings, [("Wire Redis in", "in_progress"), ("Write the docs", "pending")]
    )
    clock.advance(minutes=20)
    compact(hook, clock, transcript)
    todos = Checkpoint.objects.filter(trigger=Trigger.PRE_COMPACTION).first()
    assert todos is not None
    assert todos.current_task == "Wire Redis in"
    # The todos were read after the agent's digest: the newer first, the agent's kept.
    assert todos.next_steps == ["Write the docs", *NARRATIVE["next_steps"]]
    assert todos.decisions == NARRATIVE["decisions"]


def test_a_task_from_the_transcript_goes_stale_at_the_next_prompt(hook, clock, tmp_path, settings):
    prompt(hook, "Add rate limiting to POST /api/login")
    transcript = todo_transcript(tmp_path, settings, [("Wire Redis in", "in_progress")])
    compact(hook, clock, transcript)
    send(hook, payload("post_tool_use_write"))  # no new prompt: it still holds
    send(hook, payload("session_end"))
    send(hook, payload("session_start_resume"))
    held = Checkpoint.objects.filter(trigger=Trigger.SESSION_END).get()
    assert held.current_task == "Wire Redis in"
    clock.advance(minutes=1)
    prompt(hook, "now something else entirely")
    send(hook, payload("session_end"))
    stale = Checkpoint.objects.filter(trigger=Trigger.SESSION_END).first()
    assert stale is not None
    assert stale.current_task == ""


def test_memory_queries_and_notes_are_stored_once(hook):
    for _ in range(8):
        prompt(hook, "Add rate limiting to POST /api/login")
    prompt(hook, "# use port 6380")
    prompt(hook, "# use port 6380")
    send(hook, payload("session_end"))
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.memory_queries == ["add rate limiting post /api/login", "port"]
    assert checkpoint.recent_remembers == ["use port 6380"]
    assert "2 recent queries, 1 remembered" in checkpoint.digest


def test_secrets_in_the_new_sections_come_out_redacted(hook, clock):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    prompt(hook, "Add rate limiting to POST /api/login")
    prompt(hook, f"# the deploy token is {token}")
    send(hook, payload("stop", last_assistant_message=f"Pushed with {token}; tests pass."))
    summary = f"The user gave the token {token} for the deploy."
    send(hook, payload("pre_compact_auto", transcript_path=UNREADABLE))
    send(hook, payload("post_compact_manual", compact_summary=summary))
    send(hook, payload("session_end"))
    clock.advance(minutes=5)
    context = context_of(send(hook, payload("session_start_startup", session_id="next")))
    for title in ("### Remembered notes", "### Last assistant message", "### Compaction summary"):
        assert title in context
    assert token not in context
    assert "ghp_a1B2" not in context
    assert context.count("[REDACTED]") >= 3


def test_the_api_preview_at_its_smallest_budgets_leads_with_the_goal(hook):
    prompt(hook, "Add rate limiting to POST /api/login")
    digest(hook)
    send(hook, payload("session_end"))
    for budget in (200, 300, 500):
        body = hook.get(f"/api/recovery/?session={SESSION}&budget={budget}").json()
        text = body["context"]
        assert len(text) <= budget
        goal = ["### Goal", "Add rate limiting to POST /api/login"]
        assert goal in (text.splitlines()[2:4], text.splitlines()[3:5])
        if budget < 500:
            assert body["omitted"]
        if body["omitted"]:
            assert text.splitlines()[-1].startswith("_Omitted for space:")


def answers_transcript(tmp_path, answers):
    """A readable transcript where the user answered the agent's question (AskUserQuestion)."""
    pairs = ", ".join(f'"{q}"="{a}"' for q, a in answers.items())
    lines = [
        {
            "type": "user",
            "isSidechain": False,
            "message": {"role": "user", "content": "Plan the session-share plugin"},
        },
        {
            "type": "assistant",
            "isSidechain": False,
            "requestId": "r1",
            "message": {
                "id": "m1",
                "model": "claude-sonnet-4-6",
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "AskUserQuestion", "input": {}}
                ],
            },
        },
        {
            "type": "user",
            "isSidechain": False,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "content": f"User has answered your questions: {pairs}. You can now "
                        "continue with the user's answers in mind.",
                        "tool_use_id": "t1",
                    }
                ],
            },
            "toolUseResult": {"questions": [], "answers": answers},
        },
    ]
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return path


def test_the_users_answers_join_the_agents_decisions_at_compaction(hook, clock, tmp_path):
    prompt(hook, "Plan the session-share plugin")
    digest(hook)
    prompt(hook, "go on")
    transcript = answers_transcript(
        tmp_path, {"How should users specify gist visibility?": "Default unlisted only (MVP)"}
    )

    context = compact(hook, clock, transcript)

    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    answer = "How should users specify gist visibility? → Default unlisted only (MVP)"
    assert checkpoint.decisions == [*NARRATIVE["decisions"], answer]
    assert answer in context
    assert NARRATIVE["decisions"][0] in context
    prompt(hook, "now publish it")
    send(hook, payload("session_end"))  # a passive checkpoint keeps both
    final = Checkpoint.objects.get(trigger=Trigger.SESSION_END)
    assert final.decisions == checkpoint.decisions


def test_a_go_ahead_after_a_compaction_does_not_push_out_the_latest_request(hook, clock):
    prompt(hook, "Add rate limiting to POST /api/login")
    prompt(hook, "and the signup route too")
    compact(hook, clock)
    prompt(hook, "continue")
    prompt(hook, "ok")
    send(hook, payload("session_end"))
    clock.advance(minutes=5)
    context = context_of(send(hook, payload("session_start_startup", session_id="next")))
    assert "### Latest request\nand the signup route too\n" in context
    assert "continue" not in context.splitlines()
    assert "- continue" not in context.splitlines()
