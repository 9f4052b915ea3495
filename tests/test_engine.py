"""The continuity engine end to end, through the real hook URL with Claude Code payloads."""

from __future__ import annotations

import pytest

from checkpoints.harnesses.base import remembered_text
from checkpoints.harnesses.claude_code import REMEMBER_PREFIXES
from checkpoints.models import Checkpoint, HookDelivery, Injection, Session, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.events import query_terms
from checkpoints.services.pending import checkpoints_flush_due
from tests.hookutil import TRANSCRIPT, client_read, configure, context_of, payload, send

pytestmark = pytest.mark.django_db

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
PROJECT = "/home/alice/projects/webapp"


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def prompt(hook, text="Add rate limiting to POST /api/login", session=SESSION, **extra):
    response = send(hook, payload("user_prompt_submit", prompt=text, session_id=session, **extra))
    assert response.status_code == 200, response.content
    return response


def test_a_session_of_25_prompts_yields_the_periodic_checkpoints_the_config_implies(hook, clock):
    send(hook, payload("session_start_startup"))
    for number in range(1, 26):
        clock.advance(seconds=20)
        prompt(hook, f"step {number}: refactor the checkout module")
    session = Session.objects.get(session_key=SESSION)
    assert session.prompt_count == 25
    checkpoints = list(session.checkpoints.order_by("created_at"))
    assert [c.trigger for c in checkpoints] == [Trigger.PERIODIC, Trigger.PERIODIC]
    assert [c.prompt_count for c in checkpoints] == [10, 20]
    assert checkpoints[1].parent == checkpoints[0]
    assert checkpoints[0].parent is None
    assert checkpoints[1].digest.startswith("## Session Checkpoint")
    assert "**Prompts:** 20" in checkpoints[1].digest
    assert len(session.recent_prompts) == 10
    assert session.recent_prompts[-1] == "step 25: refactor the checkout module"
    assert session.recent_queries == ["step refactor checkout module"]  # the same terms, once


def test_time_interval_makes_a_checkpoint_due_before_the_prompt_interval(
    hook, clock, django_capture_on_commit_callbacks
):
    configure(prompt_interval=100, time_interval_minutes=15)
    send(hook, payload("session_start_startup"))
    prompt(hook, "first")
    clock.advance(minutes=16)
    # The queued flush task runs when the request's transaction commits.
    with django_capture_on_commit_callbacks(execute=True) as queued:
        prompt(hook, "second, a quarter of an hour later")
    assert len(queued) == 1
    assert Checkpoint.objects.filter(trigger=Trigger.PERIODIC).count() == 1
    prompt(hook, "third, right after")
    assert Checkpoint.objects.filter(trigger=Trigger.PERIODIC).count() == 1


def test_pending_checkpoints_wait_for_the_debounce_and_merge(hook, clock):
    configure(prompt_interval=2, debounce_seconds=30)
    for number in range(5):  # due at 2 (marked); 4 merges into the pending one
        prompt(hook, f"prompt {number}")
    session = Session.objects.get()
    assert session.checkpoint_pending_since is not None
    assert not Checkpoint.objects.exists()
    assert checkpoints_flush_due() == 0  # debounce not over
    clock.advance(seconds=31)
    assert checkpoints_flush_due() == 1
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.prompt_count == 5  # the latest state wins
    session.refresh_from_db()
    assert session.checkpoint_pending_since is None


def test_pending_checkpoint_is_flushed_by_the_next_session_start(hook, clock):
    configure(prompt_interval=1, debounce_seconds=600)
    prompt(hook, "one")
    assert not Checkpoint.objects.exists()
    send(hook, payload("session_start_resume"))
    assert Checkpoint.objects.filter(trigger=Trigger.PERIODIC).count() == 1


def test_precompact_then_compact_start_recovers_task_and_files_from_the_transcript(hook):
    send(hook, payload("session_start_startup"))
    prompt(hook, "Add rate limiting to POST /api/login")
    send(hook, payload("post_tool_use_edit"))
    response = send(hook, client_read(payload("pre_compact_auto", transcript_path=str(TRANSCRIPT))))
    assert response.status_code == 200
    assert response.json() == {}
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.current_task == "Continue: finish the Redis conversion and run the tests."
    assert checkpoint.context_tokens == 21625
    assert checkpoint.git_branch == "feat/login-rate-limit"

    send(hook, payload("post_compact_manual"))
    response = send(hook, payload("session_start_compact"))
    body = response.json()
    assert body["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = body["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("## Session Recovery Context")
    assert "pre-compaction checkpoint of this session" in context
    assert "finish the Redis conversion" in context
    # Named relative to the project.
    assert "\n- src/middleware/rateLimit.ts\n" in context
    assert "\n- src/routes/auth.ts" in context
    assert f"{PROJECT}/" not in context
    injection = Injection.objects.get()
    assert injection.source == "compact"
    assert injection.match == "session"
    assert injection.checkpoint == checkpoint
    assert injection.size_chars == len(context) <= config_get().recovery_budget_chars
    session = Session.objects.get()
    assert session.compaction_count == 1
    assert "fixed-window limiter" in session.compact_summary
    assert not session.recovery_due


def test_compaction_without_a_session_start_recovers_on_the_next_prompt(hook):
    prompt(hook, "Move the counter store to Redis")
    send(hook, payload("pre_compact_manual", transcript_path="/nonexistent/transcript.jsonl"))
    send(hook, payload("post_compact_manual"))
    response = prompt(hook, "go on")
    body = response.json()
    assert body["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert "Move the counter store to Redis" in body["hookSpecificOutput"]["additionalContext"]
    assert context_of(prompt(hook, "and again")) == ""  # once only


def test_missing_transcript_degrades_to_the_session_row(hook):
    prompt(hook, "Write the migration for invoices")
    send(hook, payload("post_tool_use_write"))
    response = send(hook, payload("pre_compact_auto", transcript_path="/no/such/file.jsonl"))
    assert response.status_code == 200
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert checkpoint.recent_prompts == ["Write the migration for invoices"]
    assert checkpoint.modified_files
    assert checkpoint.context_tokens is None


def test_new_session_in_the_same_project_recovers_within_the_window_only(hook, clock):
    prompt(hook, "Ship the invoice export", session="old-session")
    send(hook, payload("session_end", session_id="old-session"))
    clock.advance(hours=3)
    inside = send(hook, payload("session_start_startup", session_id="new-session"))
    context = context_of(inside)
    assert "checkpoint of an earlier session in this project (`old-session`)" in context
    assert "Ship the invoice export" in context
    assert Injection.objects.get().match == "project"

    clock.advance(hours=2)  # now 5 h after the old checkpoint: outside the 4 h window
    outside = send(hook, payload("session_start_startup", session_id="newer-session"))
    assert outside.json() == {}


def test_another_owners_project_is_never_recovered(hook, client_for, stranger):
    prompt(hook, "Secret roadmap work", session="alice-1")
    send(hook, payload("session_end", session_id="alice-1"))
    other = client_for(stranger, "ingest")
    response = send(other, payload("session_start_startup", session_id="mallory-1"))
    assert response.json() == {}


def test_clear_gets_nothing(hook):
    prompt(hook, "Something to recover")
    send(hook, payload("session_end", session_id=SESSION))
    response = send(hook, payload("session_start_clear", session_id="after-clear"))
    assert response.status_code == 200
    assert response.json() == {}
    response = send(hook, payload("session_start_clear"))
    assert response.json() == {}
    assert not Injection.objects.exists()


def test_lineage_recovers_across_projects_and_outside_the_window(hook, clock):
    prompt(hook, "Port the parser", session="first", cwd="/src/one")
    send(hook, payload("session_end", session_id="first"))
    clock.advance(days=2)
    start = payload(
        "session_start_startup",
        session_id="second",
        cwd="/src/two",
        signet={"previous_session_key": "first"},
    )
    context = context_of(send(hook, start))
    assert "the session this one continues" in context
    assert "Port the parser" in context
    assert Session.objects.get(session_key="second").previous_session.session_key == "first"


def test_session_end_writes_a_final_checkpoint_and_closes(hook):
    prompt(hook, "Tidy the settings module")
    send(hook, payload("session_end"))
    session = Session.objects.get()
    assert session.ended_at is not None
    assert session.end_reason == "prompt_input_exit"
    assert session.checkpoints.get().trigger == Trigger.SESSION_END
    send(hook, payload("session_end"))  # nothing new happened since
    assert session.checkpoints.count() == 1


def test_session_end_for_clear_writes_no_checkpoint(hook):
    prompt(hook, "Throwaway question")
    send(hook, payload("session_end_clear"))
    assert not Checkpoint.objects.exists()
    assert Session.objects.get().end_reason == "clear"


def test_a_session_first_seen_mid_stream_is_created_on_the_fly(hook):
    response = send(hook, payload("post_tool_use_edit"))
    assert response.status_code == 200
    session = Session.objects.get()
    assert session.modified_files == [f"{PROJECT}/src/routes/auth.ts"]
    assert session.prompt_count == 0
    assert session.project == PROJECT


def test_stop_keeps_the_last_assistant_message(hook):
    send(hook, payload("stop"))
    assert Session.objects.get().last_assistant_message.startswith("Rate limiting is in place")


def test_unknown_events_are_accepted_ignored_and_counted(hook):
    for name in ("notification_idle", "subagent_stop"):
        response = send(hook, payload(name))
        assert response.status_code == 200
        assert response.json() == {}
    response = send(hook, payload("user_prompt_submit", hook_event_name="FutureEvent"))
    assert response.json() == {}
    session = Session.objects.get()
    assert session.ignored_event_count == 3
    assert session.prompt_count == 0


def test_remembers_are_kept(hook):
    prompt(hook, "/remember the staging database is read-only on Fridays")
    prompt(hook, "# prefer pnpm over npm in this repo")
    prompt(hook, "## A heading is not a memory")
    send(
        hook,
        {
            "session_id": SESSION,
            "hook_event_name": "Remember",
            "cwd": PROJECT,
            "text": "deploys go through the release branch",
        },
    )
    assert Session.objects.get().recent_remembers == [
        "the staging database is read-only on Fridays",
        "prefer pnpm over npm in this repo",
        "deploys go through the release branch",
    ]


def test_buffers_drop_the_oldest_first(hook):
    for number in range(30):
        prompt(hook, f"/remember note {number} about module{number}")
    session = Session.objects.get()
    assert len(session.recent_remembers) == 10
    assert session.recent_remembers[0] == "note 20 about module20"
    assert len(session.recent_prompts) == 10
    assert len(session.recent_queries) == 20


def test_idempotency_key_makes_a_replay_count_once(hook):
    body = payload("user_prompt_submit")
    for _ in range(3):
        assert send(hook, body, **{"Idempotency-Key": "evt-123"}).status_code == 200
    assert Session.objects.get().prompt_count == 1
    assert HookDelivery.objects.count() == 1
    send(hook, body, **{"Idempotency-Key": "evt-124"})
    assert Session.objects.get().prompt_count == 2


def test_disabled_config_keeps_nothing(hook):
    configure(enabled=False)
    assert prompt(hook).json() == {}
    assert not Session.objects.exists()


def test_checkpoint_cap_is_enforced_on_write(hook, django_capture_on_commit_callbacks):
    configure(prompt_interval=1, max_checkpoints_per_session=3)
    for number in range(8):
        with django_capture_on_commit_callbacks(execute=True):
            prompt(hook, f"prompt {number}")
    kept = list(Checkpoint.objects.order_by("created_at").values_list("prompt_count", "parent"))
    assert [count for count, _ in kept] == [6, 7, 8]
    assert kept[0][1] is None  # its parent went: the reference is cleared, the row kept


def test_query_terms_and_remember_detection():
    assert query_terms("Please add rate limiting to POST /api/login with Redis") == (
        "add rate limiting post /api/login redis"
    )
    assert remembered_text("/remember  use uv", REMEMBER_PREFIXES) == "use uv"
    assert remembered_text("#use tabs", REMEMBER_PREFIXES) == "use tabs"
    assert remembered_text("### heading", REMEMBER_PREFIXES) == ""
    assert remembered_text("plain prompt", REMEMBER_PREFIXES) == ""


def test_the_server_never_opens_the_transcript_a_request_names(client_for, owner, teammate):
    """bob's PreCompact naming alice's transcript (here, on the server's own disk) puts
    nothing of hers into his checkpoint: only what a client read and sent counts."""
    send(client_for(owner, "ingest"), payload("user_prompt_submit", prompt="alice's own work"))
    bob = client_for(teammate, "ingest")
    send(bob, payload("pre_compact_auto", session_id="bob-1", transcript_path=str(TRANSCRIPT)))
    checkpoint = Checkpoint.objects.get(owner=teammate)
    assert checkpoint.current_task == ""
    assert checkpoint.context_tokens is None
    assert checkpoint.git_branch == ""
    assert "Redis" not in repr(Checkpoint.objects.filter(owner=teammate).values_list())


def test_transcript_facts_the_client_sent_are_checked_and_bounded(hook):
    facts = {
        "current_task": "Ship it",
        "todos": [{"content": f"step {n}", "status": "pending"} for n in range(500)],
        "recent_prompts": [f"prompt {n}" for n in range(500)],
        "modified_files": [f"/p/{n}.py" for n in range(500)],
        "decisions": [f"decision {n} " * 50 for n in range(500)],
        "context_tokens": 10**40,
    }
    body = payload("pre_compact_auto", signet={"transcript": facts})
    assert send(hook, body).status_code == 200
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.current_task == "Ship it"
    assert len(checkpoint.next_steps) <= 100
    assert checkpoint.recent_prompts[-1] == "prompt 499"
    assert len(checkpoint.recent_prompts) <= 10
    assert len(checkpoint.modified_files) <= 50
    assert len(checkpoint.decisions) == 20
    assert checkpoint.decisions[-1].startswith("decision 499 ")
    assert all(len(decision) <= 300 for decision in checkpoint.decisions)
    assert checkpoint.context_tokens == 2**31 - 1
    for bad in (
        {"todos": "x"},
        {"todos": [{"content": 1, "status": "pending"}]},
        {"recent_prompts": [1]},
        {"decisions": "use uv"},
        {"context_tokens": "many"},
        {"context_tokens": True},
        {"current_task": ["x"]},
        "facts",
    ):
        response = send(hook, payload("pre_compact_auto", signet={"transcript": bad}))
        assert response.status_code == 400, bad
        assert "signet.transcript" in response.json()["detail"]
    assert Checkpoint.objects.count() == 1


def test_an_idle_session_does_not_bury_the_last_good_checkpoint(hook):
    prompt(hook, "Ship the invoice export", session="a")
    send(hook, payload("session_end", session_id="a"))
    send(hook, payload("session_start_startup", session_id="b"))  # recovers a, then quits
    send(hook, payload("session_end", session_id="b"))
    assert not Checkpoint.objects.filter(session_key="b").exists()
    context = context_of(send(hook, payload("session_start_startup", session_id="c")))
    assert "Ship the invoice export" in context


def test_session_end_after_compaction_keeps_the_transcripts_task(hook):
    prompt(hook, "Add rate limiting to POST /api/login")
    send(hook, client_read(payload("pre_compact_auto", transcript_path=str(TRANSCRIPT))))
    send(hook, payload("post_compact_manual"))
    send(hook, payload("session_start_compact"))
    send(hook, payload("session_end"))  # the compaction's summary came since the emergency one
    assert Checkpoint.objects.count() == 2
    ended = Checkpoint.objects.get(trigger=Trigger.SESSION_END)
    assert ended.current_task == "Continue: finish the Redis conversion and run the tests."
    ended.delete()
    send(hook, payload("post_tool_use_write"))  # an edit, no new prompt
    send(hook, payload("session_end"))
    final = Checkpoint.objects.filter(trigger=Trigger.SESSION_END).get()
    assert final.current_task == "Continue: finish the Redis conversion and run the tests."
    assert f"{PROJECT}/src/middleware/rateLimit.ts" in final.modified_files
    assert Session.objects.get().modified_files[-1].endswith(".ts")


def test_hostile_transcript_content_never_costs_the_checkpoint(hook, tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        '{"type":"user","isSidechain":false,"gitBranch":"ma\\u0000in",'
        '"message":{"role":"user","content":"fix the \\ud800 bug \\u0000 now"}}',
        '{"type":"assistant","isSidechain":false,"requestId":"r1","message":{"id":"m1",'
        '"model":"m","role":"assistant","content":[{"type":"text","text":"ok \\udfff"}],'
        '"usage":{"input_tokens":1000000000000000000000000000000,'
        '"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}}',
    ]
    path.write_text("\n".join(lines) + "\n")
    response = send(hook, client_read(payload("pre_compact_auto", transcript_path=str(path))))
    assert response.status_code == 200
    checkpoint = Checkpoint.objects.get(trigger=Trigger.PRE_COMPACTION)
    assert "\x00" not in checkpoint.current_task
    assert checkpoint.current_task.startswith("fix the ")
    assert checkpoint.context_tokens == 2**31 - 1


def test_a_first_prompt_without_session_start_gets_the_project_recovery(hook, clock):
    prompt(hook, "Ship the invoice export", session="earlier")
    send(hook, payload("session_end", session_id="earlier"))
    clock.advance(minutes=30)
    response = prompt(hook, "carry on", session="hookless")
    assert "Ship the invoice export" in context_of(response)
    assert context_of(prompt(hook, "next", session="hookless")) == ""


def test_autonomous_work_gets_time_based_checkpoints(hook, clock):
    configure(prompt_interval=100, time_interval_minutes=15)
    prompt(hook, "Refactor the billing module on your own")
    for minute in range(1, 81):
        clock.advance(minutes=1)
        send(hook, payload("post_tool_use_write", tool_input={"file_path": f"/w/f{minute}.py"}))
    periodic = Checkpoint.objects.filter(trigger=Trigger.PERIODIC).count()
    assert periodic == 5  # at 15, 30, 45, 60, 75 minutes (the next edit writes each)


def test_periodic_slots_do_not_drift_when_the_write_is_late(hook, clock):
    configure(prompt_interval=10, debounce_seconds=30)
    for number in range(1, 13):  # due at 10; 11 and 12 arrive inside the debounce
        prompt(hook, f"p{number}")
    clock.advance(seconds=31)
    for number in range(13, 20):
        prompt(hook, f"p{number}")  # 13 writes the pending one (state at 12)
    session = Session.objects.get()
    assert Checkpoint.objects.get().prompt_count == 12
    assert session.checkpoint_pending_since is None
    prompt(hook, "p20")
    session.refresh_from_db()
    assert session.checkpoint_pending_since is not None  # due at 20, not at 22


def test_a_huge_prompt_is_redacted_before_it_is_cut(hook):
    secret = "AKIA" + "Q3EGSMTLNYWXJ5PV"
    text = "x" * 490 + " " + secret + " " + "y" * 900_000
    response = prompt(hook, text)
    assert response.status_code == 200
    kept = Session.objects.get().recent_prompts[-1]
    assert len(kept) == 500
    assert "AKIAQ3EG" not in kept
    assert kept.endswith(" [REDACTED")  # the marker itself is what the cut falls in


# --- a conversation the harness kept (Claude Code's --resume / --continue) ---------------------


def test_each_resume_of_a_kept_conversation_gets_no_copy_of_its_own_checkpoint(hook):
    """The conversation is where the checkpoint came from: a block at each resume would pile
    up (1, 2, 3 … in the model's requests), saying again what the conversation holds."""
    prompt(hook, "Add VAT to the invoice PDF")
    send(hook, payload("session_end"))
    for _ in range(3):
        assert send(hook, payload("session_start_resume")).json() == {}
        prompt(hook, "carry on")
        send(hook, payload("session_end"))
    assert not Injection.objects.exists()


def test_a_compaction_after_a_resume_is_recovered_once(hook):
    prompt(hook, "Add VAT to the invoice PDF")
    send(hook, payload("session_end"))
    assert send(hook, payload("session_start_resume")).json() == {}
    send(hook, payload("pre_compact_manual", transcript_path="/no/such/file.jsonl"))
    context = context_of(send(hook, payload("session_start_compact")))
    assert "pre-compaction checkpoint of this session" in context
    send(hook, payload("post_compact_manual"))
    assert context_of(prompt(hook, "go on")) == ""
    assert [i.source for i in Injection.objects.all()] == ["compact"]


def test_a_kept_conversation_with_no_checkpoint_of_its_own_is_recovered_once(hook):
    """A session that never had a recovery (it began with /clear) is handed the project's
    latest at its first resume; its conversation keeps that block, so none at the next."""
    prompt(hook, "Ship the invoice export", session="old-session")
    send(hook, payload("session_end", session_id="old-session"))
    assert send(hook, payload("session_start_clear", session_id="fresh")).json() == {}
    first = context_of(send(hook, payload("session_start_resume", session_id="fresh")))
    assert "Ship the invoice export" in first
    assert send(hook, payload("session_start_resume", session_id="fresh")).json() == {}
    assert Injection.objects.count() == 1


def test_a_start_that_does_not_keep_the_conversation_still_recovers(hook):
    prompt(hook, "Add VAT to the invoice PDF")
    send(hook, payload("session_end"))
    context = context_of(send(hook, payload("session_start_startup")))
    assert "Add VAT to the invoice PDF" in context


# --- which session of the project a new one recovers from --------------------------------------


def test_a_new_session_recovers_the_substantive_session_not_a_later_ping(hook, clock):
    for number, text in enumerate(["Add VAT to the invoice PDF", "Round the VAT per line"]):
        prompt(hook, text, session="vat-work")
        clock.advance(minutes=1 + number)
    send(hook, payload("post_tool_use_edit", session_id="vat-work"))
    send(hook, payload("session_end", session_id="vat-work"))
    clock.advance(minutes=5)
    prompt(hook, "ping", session="ping")
    send(hook, payload("session_end", session_id="ping"))
    clock.advance(minutes=5)

    context = context_of(send(hook, payload("session_start_startup", session_id="next")))

    assert "of an earlier session in this project (`vat-work`)" in context
    assert "Round the VAT per line" in context
    assert "ping" not in context.split("\n", 2)[2]
    assert "Chosen over 1 newer checkpoint of this project with less work in them." in context
    injection = Injection.objects.get(session__session_key="next")
    assert injection.checkpoint.session_key == "vat-work"


def test_with_no_substantive_session_the_newest_is_recovered(hook, clock):
    prompt(hook, "hello", session="first")
    send(hook, payload("session_end", session_id="first"))
    clock.advance(minutes=5)
    prompt(hook, "ping", session="second")
    send(hook, payload("session_end", session_id="second"))
    clock.advance(minutes=5)

    context = context_of(send(hook, payload("session_start_startup", session_id="next")))

    assert "(`second`)" in context
    assert "Chosen over" not in context


def test_an_agents_digest_is_substance_enough(hook, clock, client_for, owner):
    prompt(hook, "Plan the VAT work", session="planned")
    writer = client_for(owner, "write")
    created = writer.post(
        "/api/checkpoints/",
        {"session_key": "planned", "digest": "Plan: VAT per line, then the PDF."},
        format="json",
    )
    assert created.status_code == 201, created.content
    clock.advance(minutes=5)
    prompt(hook, "ping", session="ping")
    send(hook, payload("session_end", session_id="ping"))
    clock.advance(minutes=5)

    context = context_of(send(hook, payload("session_start_startup", session_id="next")))

    assert "(`planned`)" in context
