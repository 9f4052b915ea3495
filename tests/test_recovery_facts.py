"""What the service keeps for recovery beyond the last prompt (#30): the session's goal, the
rules its user stated, the agent's next steps beside its task list, what a compaction
summary says, the whole prompt record, a last assistant message that is not stale, and a
dead session's pending work before the next session starts. End to end through the hook
URL and the API, with Claude Code payloads."""

from __future__ import annotations

import json

import pytest

from checkpoints.models import Checkpoint, Session, Trigger
from checkpoints.services.pending import checkpoints_flush_due
from tests.hookutil import configure, context_of, payload, send

pytestmark = pytest.mark.django_db

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
PROJECT = "/home/alice/projects/webapp"
UNREADABLE = "/nonexistent/t.jsonl"  # the client cannot read it: no transcript facts
OPENING = "Add rate limiting to POST /api/login: 5 attempts per IP per 15 minutes"


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest", "write", "read")


def prompt(hook, text, session=SESSION):
    response = send(hook, payload("user_prompt_submit", prompt=text, session_id=session))
    assert response.status_code == 200, response.content
    return response


def capture(hook, **fields):
    body = {"session_key": SESSION, "project": PROJECT, "trigger": "agent", **fields}
    response = hook.post(
        "/api/checkpoints/", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def periodic(clock):
    """The session's pending periodic checkpoint, written by the sweep."""
    clock.advance(minutes=1)
    assert checkpoints_flush_due() == 1
    return Checkpoint.objects.filter(trigger=Trigger.PERIODIC).latest("created_at")


# --- 1. The goal ----------------------------------------------------------------------------


def test_the_goal_is_the_opening_substantive_request_not_a_greeting_or_a_note(hook, clock):
    configure(prompt_interval=6)
    notice = "<task-notification><status>failed</status></task-notification>"
    for text in ("hi", notice, "# the staging Redis listens on port 6380", OPENING, "ok"):
        prompt(hook, text)
    prompt(hook, "and the signup route too")
    assert Session.objects.get().goal == OPENING
    checkpoint = periodic(clock)
    assert checkpoint.goal == OPENING
    assert f"### Goal\n{OPENING}" in checkpoint.digest


def test_a_redirect_replaces_the_goal_and_a_plain_next_step_does_not(hook):
    prompt(hook, OPENING)
    prompt(hook, "now let's run the tests")
    prompt(hook, "forget that")  # nothing to redirect to
    assert Session.objects.get().goal == OPENING
    prompt(hook, "New task: move the session store to Redis")
    assert Session.objects.get().goal == "New task: move the session store to Redis"


def test_an_agents_digest_states_the_goal_and_later_checkpoints_keep_it(hook, clock):
    prompt(hook, OPENING)
    body = capture(hook, digest="Limiter done.", goal="Harden the login endpoint")
    assert Checkpoint.objects.get(id=body["id"]).goal == "Harden the login endpoint"
    assert body["goal"] == "Harden the login endpoint"  # the API shows it
    configure(prompt_interval=2)
    prompt(hook, "go on")
    prompt(hook, "and the signup route too")
    assert periodic(clock).goal == "Harden the login endpoint"


def test_the_transcripts_opening_request_is_the_goal_of_a_session_that_has_none(hook):
    prompt(hook, "continue")
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    body["signet"] = {"transcript": {"goal": OPENING, "current_task": "continue"}}
    send(hook, body)
    assert Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION).goal == OPENING
    assert Session.objects.get().goal == OPENING


def test_a_session_recovering_another_takes_no_goal_from_it(hook, clock):
    prompt(hook, OPENING)
    send(hook, payload("session_end"))
    clock.advance(minutes=1)
    other = "b7c1d2e3-0000-4000-8000-000000000001"
    send(hook, payload("session_start_startup", session_id=other))
    assert Session.objects.get(session_key=other).goal == ""
    prompt(hook, "Write the README's rate limiting section", session=other)
    assert Session.objects.get(session_key=other).goal == "Write the README's rate limiting section"


# --- 2. Decisions from the user -------------------------------------------------------------


def test_a_rule_the_user_states_is_a_decision_of_the_next_periodic_checkpoint(hook, clock):
    configure(prompt_interval=3)
    prompt(hook, OPENING)
    prompt(hook, "Use Redis, not memcached. Keep the limiter in its own module?")
    prompt(hook, "don't touch the migrations")
    checkpoint = periodic(clock)
    assert checkpoint.decisions == ["Use Redis, not memcached.", "don't touch the migrations"]


def test_user_decisions_are_deduplicated_newest_last_and_merged_with_the_agents(hook, clock):
    prompt(hook, "Never push to main.")
    prompt(hook, "always run ruff before committing")
    prompt(hook, "never push to main")  # said again: it moves to the end
    assert Session.objects.get().decisions == [
        "always run ruff before committing",
        "never push to main",
    ]
    body = capture(hook, digest="Limiter done.", decisions=["Fixed window, 15 minutes"])
    assert Checkpoint.objects.get(id=body["id"]).decisions == [
        "Fixed window, 15 minutes",
        "always run ruff before committing",
        "never push to main",
    ]
    configure(prompt_interval=1)
    prompt(hook, "Prefer small commits.")
    assert periodic(clock).decisions == [
        "Fixed window, 15 minutes",
        "always run ruff before committing",
        "never push to main",
        "Prefer small commits.",
    ]


def test_a_note_is_not_a_decision(hook):
    prompt(hook, "# always use port 6380 for the staging Redis")
    session = Session.objects.get()
    assert session.decisions == []
    assert session.recent_remembers == ["always use port 6380 for the staging Redis"]


# --- 3. Next steps: the agent's and the task list's, merged ----------------------------------


def stop_with_tasks(hook, *todos):
    tasks = {"current_task": "", "todos": [{"content": c, "status": s} for c, s in todos]}
    response = send(hook, payload("stop", signet={"tasks": tasks}))
    assert response.status_code == 200, response.content


def test_the_agents_next_steps_and_the_task_lists_are_merged_the_newer_first(hook, clock):
    configure(prompt_interval=1)
    prompt(hook, OPENING)
    stop_with_tasks(hook, ("Add the limiter", "completed"), ("Write the docs", "pending"))
    body = capture(hook, digest="Limiter done.", next_steps=["Run the auth tests on Redis"])
    agent_first = ["Run the auth tests on Redis", "Write the docs"]
    assert Checkpoint.objects.get(id=body["id"]).next_steps == agent_first
    prompt(hook, "go on")
    assert periodic(clock).next_steps == agent_first  # not replaced by the list's
    # The list changes after the digest: its pending items are the newer.
    stop_with_tasks(hook, ("Write the docs", "pending"), ("Add a changelog entry", "pending"))
    prompt(hook, "go on")
    assert periodic(clock).next_steps == [
        "Write the docs",
        "Add a changelog entry",
        "Run the auth tests on Redis",
    ]


# --- 4. The compaction summary --------------------------------------------------------------

SUMMARY = """This session is being continued from a previous conversation that ran out of context.

Summary:
1. Primary Request and Intent:
   Rate-limit POST /api/login to 5 attempts per IP per 15 minutes, then move the counters
   to Redis.

2. Key Technical Concepts:
   - Fixed-window counters
3. Pending Tasks:
   - Make loginRateLimit async
   - Re-run npm test -- auth
4. Current Work:
   Converting src/middleware/rateLimit.ts to Redis INCR + PEXPIRE.
5. Optional Next Step:
   Remove the in-memory Map once the tests pass.
"""
PENDING = [
    "Make loginRateLimit async",
    "Re-run npm test -- auth",
    "Remove the in-memory Map once the tests pass.",
]


def test_a_compaction_summary_gives_the_goal_steps_and_task_until_the_next_prompt(hook, clock):
    prompt(hook, "continue")
    send(hook, payload("pre_compact_auto", transcript_path=UNREADABLE))
    send(hook, payload("post_compact_manual", compact_summary=SUMMARY))
    send(hook, payload("session_start_compact"))
    session = Session.objects.get()
    assert session.goal.startswith("Rate-limit POST /api/login to 5 attempts per IP")
    # Right after the compaction the summary is what the work is: a session that ends now
    # (or dies, and is checkpointed) hands on its steps and task.
    send(hook, payload("session_end"))
    ended = Checkpoint.objects.get(trigger=Trigger.SESSION_END)
    assert ended.goal == session.goal
    assert ended.next_steps == PENDING
    assert ended.current_task == "Converting src/middleware/rateLimit.ts to Redis INCR + PEXPIRE."
    clock.advance(minutes=1)
    other = "b7c1d2e3-0000-4000-8000-000000000002"
    context = context_of(send(hook, payload("session_start_startup", session_id=other)))
    assert "Make loginRateLimit async" in context
    assert Session.objects.get(session_key=other).goal == ""  # its own first request will be
    # Once the user asked for more, the summary's steps and task are history; its goal holds.
    clock.advance(minutes=30)
    prompt(hook, "Now also log every refused login with the client IP")
    send(hook, payload("pre_compact_auto", transcript_path=UNREADABLE))  # the next compaction
    checkpoint = Checkpoint.objects.filter(trigger=Trigger.PRE_COMPACTION).latest("created_at")
    assert checkpoint.goal == session.goal
    assert checkpoint.next_steps == []
    assert "Converting" not in checkpoint.current_task


def test_an_older_summary_read_from_the_transcript_gives_only_the_goal(hook):
    prompt(hook, "continue")
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    body["signet"] = {"transcript": {"compact_summary": SUMMARY, "current_task": "continue"}}
    send(hook, body)
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.goal.startswith("Rate-limit POST /api/login")
    assert checkpoint.next_steps == []  # an earlier compaction's, overtaken since
    session = Session.objects.get()
    assert session.compact_summary == SUMMARY
    assert session.summary_prompt is None


def test_the_summarys_request_outranks_the_opening_request_but_not_the_agents_goal(hook):
    prompt(hook, OPENING)
    assert Session.objects.get().goal_source == "prompt"
    send(hook, payload("post_compact_manual", compact_summary=SUMMARY))
    session = Session.objects.get()
    assert session.goal.startswith("Rate-limit POST /api/login to 5 attempts")
    assert session.goal_source == "summary"
    capture(hook, digest="Limiter in place.", goal="Harden the login endpoint")
    send(hook, payload("post_compact_manual", compact_summary=SUMMARY))
    assert Session.objects.get().goal == "Harden the login endpoint"


def test_a_redirect_before_a_fresh_summary_gives_way_to_it_but_not_to_an_older_one(hook):
    prompt(hook, OPENING)
    prompt(hook, "New task: move the session store to Redis")
    assert Session.objects.get().goal_source == "redirect"
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    body["signet"] = {"transcript": {"compact_summary": SUMMARY}}
    send(hook, body)  # an older compaction's summary, read from the transcript
    assert Session.objects.get().goal == "New task: move the session store to Redis"
    send(hook, payload("post_compact_manual", compact_summary=SUMMARY))  # this compaction's
    assert Session.objects.get().goal.startswith("Rate-limit POST /api/login")


# --- 5. The prompt record -------------------------------------------------------------------


def test_the_pre_compaction_checkpoint_merges_the_prompt_record_with_the_transcripts(hook):
    long = OPENING + ". " + "Keep the error messages as they are. " * 20
    for text in (long, "add the signup route too", "and the password reset", "go on"):
        prompt(hook, text)
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    read = [
        "and the password reset",
        "go on",
        "why does the reset test fail?",  # the server missed it
    ]
    body["signet"] = {"transcript": {"recent_prompts": read, "current_task": read[-1]}}
    send(hook, body)
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.recent_prompts == [
        long[:500],
        "add the signup route too",
        "and the password reset",
        "go on",
        "why does the reset test fail?",
    ]


def test_a_prompt_cut_shorter_in_one_record_is_the_same_prompt(hook):
    long = OPENING + ". " + "Keep the error messages as they are. " * 20
    prompt(hook, long)
    prompt(hook, "go")
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    cut = long[:299].rstrip() + "…"  # as a transcript reader cuts it
    body["signet"] = {"transcript": {"recent_prompts": [cut, "go on", "go"]}}
    send(hook, body)
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    # "go" and "go on" are two prompts; the long one is one, kept at its longest.
    assert checkpoint.recent_prompts == [long[:500], "go on", "go"]


# --- 6. The last assistant message ----------------------------------------------------------


def stop(hook, message):
    response = send(hook, payload("stop", last_assistant_message=message))
    assert response.status_code == 200, response.content


def compaction(hook, clock, **pre):
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    body["signet"] = {"transcript": {"last_assistant_message": "Limiter wired in.", **pre}}
    send(hook, body)
    clock.advance(seconds=1)
    send(hook, payload("session_start_compact"))
    send(hook, payload("post_compact_manual"))


def test_after_a_compaction_a_dead_sessions_periodic_checkpoint_has_the_newest_message(hook, clock):
    configure(prompt_interval=2)
    prompt(hook, OPENING)
    stop(hook, "Limiter wired in.")
    compaction(hook, clock)
    clock.advance(minutes=1)
    prompt(hook, "and the signup route too")
    stop(hook, "Signup is limited too.")
    prompt(hook, "go on")  # the session dies here: no Stop, no SessionEnd
    assert periodic(clock).last_assistant_message == "Signup is limited too."


def test_a_message_from_before_the_compaction_is_not_carried_past_it(hook, clock):
    configure(prompt_interval=2)
    prompt(hook, OPENING)
    stop(hook, "Limiter wired in.")
    compaction(hook, clock)
    assert (
        Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION).last_assistant_message
        == "Limiter wired in."
    )
    clock.advance(minutes=1)
    prompt(hook, "and the signup route too")
    send(hook, payload("stop", last_assistant_message=""))  # a Stop with no message
    prompt(hook, "go on")
    assert periodic(clock).last_assistant_message == ""


def test_a_late_pre_compact_does_not_bring_back_an_older_message(hook, clock):
    configure(prompt_interval=2)
    prompt(hook, OPENING)
    stop(hook, "Limiter wired in.")
    queued = clock.now
    clock.advance(seconds=5)
    send(hook, payload("session_start_compact"))
    send(hook, payload("post_compact_manual"))
    clock.advance(minutes=1)
    prompt(hook, "and the signup route too")
    stop(hook, "Signup is limited too.")
    # The PreCompact the client's outbox held, replayed now.
    body = payload("pre_compact_auto", transcript_path=UNREADABLE)
    body["signet"] = {
        "queued_at": queued.isoformat(),
        "transcript": {"last_assistant_message": "Limiter wired in."},
    }
    assert send(hook, body).status_code == 200
    assert Session.objects.get().last_assistant_message == "Signup is limited too."
    prompt(hook, "go on")
    prompt(hook, "and the reset route")
    assert periodic(clock).last_assistant_message == "Signup is limited too."


def test_a_stop_replayed_from_before_the_compaction_brings_no_message(hook, clock):
    prompt(hook, OPENING)
    queued = clock.now
    clock.advance(seconds=5)
    compaction(hook, clock)
    clock.advance(minutes=1)
    body = payload("stop", last_assistant_message="Limiter wired in.")
    body["signet"] = {"queued_at": queued.isoformat()}
    assert send(hook, body).status_code == 200
    assert Session.objects.get().last_assistant_message == ""
    stop(hook, "Signup is limited too.")  # a live Stop always replaces it
    assert Session.objects.get().last_assistant_message == "Signup is limited too."


# --- 7. A new session right after a dead one ------------------------------------------------

NEXT = "b7c1d2e3-0000-4000-8000-000000000003"


def test_a_new_session_recovers_the_work_a_dead_session_had_not_checkpointed_yet(hook, clock):
    configure(prompt_interval=2, debounce_seconds=30)
    send(hook, payload("session_start_startup"))
    prompt(hook, OPENING)
    send(hook, payload("post_tool_use_edit"))
    prompt(hook, "and the signup route too")  # marks the periodic checkpoint pending
    assert Session.objects.get().checkpoint_pending_since is not None
    assert not Checkpoint.objects.exists()  # its debounce is not over: the session dies
    clock.advance(seconds=2)
    context = context_of(send(hook, payload("session_start_startup", session_id=NEXT)))
    assert "checkpoint of an earlier session in this project (`3f2b8c1e-" in context
    assert "and the signup route too" in context
    assert "- src/routes/auth.ts" in context  # named relative to the project
    dead = Session.objects.get(session_key=SESSION)
    assert dead.checkpoint_pending_since is None
    assert not dead.changed_since_checkpoint
    assert dead.ended_at is None  # written, not ended: it may be alive in another terminal


def test_changes_not_yet_due_for_a_checkpoint_are_written_too(hook, clock):
    send(hook, payload("session_start_startup"))
    prompt(hook, OPENING)
    send(hook, payload("post_tool_use_edit"))
    context = context_of(send(hook, payload("session_start_startup", session_id=NEXT)))
    assert OPENING in context
    checkpoint = Checkpoint.objects.get(session_key=SESSION)
    assert checkpoint.trigger == Trigger.PERIODIC


def test_another_project_or_owner_or_a_compaction_start_writes_nothing(
    hook, clock, client_for, stranger
):
    send(hook, payload("session_start_startup"))
    prompt(hook, OPENING)
    send(hook, payload("session_start_startup", session_id=NEXT, cwd="/home/alice/other"))
    send(client_for(stranger, "ingest"), payload("session_start_startup", session_id=NEXT))
    compacted = "c0ffee00-0000-4000-8000-000000000004"
    send(hook, payload("session_start_compact", session_id=compacted))
    assert not Checkpoint.objects.exists()
