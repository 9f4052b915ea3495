"""One recovery injection per compaction, whatever order its events arrive in, and late
replays that record what happened without injecting or reopening anything."""

from __future__ import annotations

from itertools import permutations

import pytest
from django.utils import timezone

from checkpoints.models import Injection, Session
from tests.hookutil import context_of, payload, send

pytestmark = pytest.mark.django_db

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
EVENTS = {
    "pre": lambda: payload("pre_compact_manual", transcript_path="/nonexistent/t.jsonl"),
    "start": lambda: payload("session_start_compact"),
    "post": lambda: payload("post_compact_manual"),
    "prompt": lambda: payload("user_prompt_submit", prompt="go on with the limiter"),
}


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest", "write")


def worked_on(hook, clock):
    """A session with a task on record (an explicit checkpoint), before it compacts."""
    send(hook, payload("session_start_startup"))
    clock.advance(seconds=5)
    send(hook, payload("user_prompt_submit", prompt="Move the rate limiter to Redis"))
    clock.advance(seconds=5)
    response = hook.post(
        "/api/checkpoints/",
        {"session_key": SESSION, "current_task": "Move the rate limiter to Redis"},
        format="json",
    )
    assert response.status_code == 201, response.content
    Injection.objects.all().delete()  # the startup one is not what these tests count


def run(hook, clock, order):
    contexts = []
    for name in order:
        clock.advance(seconds=3)
        response = send(hook, EVENTS[name]())
        assert response.status_code == 200, (name, response.content)
        contexts.append(context_of(response))
    return contexts


ORDERS = [*permutations(["pre", "start", "post", "prompt"])]
LOST = [
    ("pre", "start", "prompt"),  # no PostCompact
    ("pre", "post", "prompt"),  # no SessionStart: the prompt carries it
    ("start", "post", "prompt"),  # no PreCompact
    ("pre", "prompt"),
    ("post", "prompt"),
    ("start", "prompt"),
]


@pytest.mark.parametrize("order", ORDERS + LOST, ids="-".join)
def test_exactly_one_injection_per_compaction_whatever_the_order(hook, clock, order):
    worked_on(hook, clock)
    contexts = run(hook, clock, order)
    injected = [c for c in contexts if c]
    assert len(injected) == 1, dict(zip(order, contexts, strict=True))
    assert "Move the rate limiter to Redis" in injected[0]
    assert Injection.objects.count() == 1
    session = Session.objects.get()
    assert session.compaction_count == 1
    assert not session.recovery_due
    # Later prompts inject nothing more.
    clock.advance(seconds=3)
    assert context_of(send(hook, EVENTS["prompt"]())) == ""


def test_the_session_start_injection_wins_when_it_comes_before_the_prompt(hook, clock):
    worked_on(hook, clock)
    run(hook, clock, ["pre", "start", "post", "prompt"])
    assert Injection.objects.get().source == "compact"


def test_two_compactions_inject_twice(hook, clock):
    worked_on(hook, clock)
    first = run(hook, clock, ["pre", "start", "post", "prompt"])
    clock.advance(minutes=1)
    second = run(hook, clock, ["pre", "start", "post", "prompt"])
    assert [bool(c) for c in first + second] == [False, True, False, False] * 2
    assert Session.objects.get().compaction_count == 2


def test_a_compaction_that_lost_its_precompact_does_not_swallow_the_next_one(hook, clock):
    worked_on(hook, clock)
    run(hook, clock, ["start", "post", "prompt"])
    clock.advance(minutes=30)  # the next compaction, beyond the cycle window
    contexts = run(hook, clock, ["pre", "start", "post", "prompt"])
    assert [bool(c) for c in contexts] == [False, True, False, False]
    assert Session.objects.get().compaction_count == 2


# --- Late replays ------------------------------------------------------------------------------


def queued(body, minutes_ago, clock):
    when = (clock.now - timezone.timedelta(minutes=minutes_ago)).isoformat()
    return {**body, "signet": {**body.get("signet", {}), "queued_at": when}}


def test_a_session_start_replayed_after_session_end_neither_reopens_nor_injects(hook, clock):
    worked_on(hook, clock)
    late = queued(payload("session_start_resume"), minutes_ago=1, clock=clock)
    clock.advance(seconds=5)
    send(hook, payload("session_end"))
    clock.advance(seconds=5)
    response = send(hook, late)
    assert response.status_code == 200
    assert context_of(response) == ""
    session = Session.objects.get()
    assert session.ended_at is not None
    assert not Injection.objects.exists()


def test_a_replayed_prompt_counts_but_never_injects_and_keeps_the_clock(hook, clock):
    worked_on(hook, clock)
    run(hook, clock, ["pre", "post"])  # recovery now owed to the next live prompt
    before = Session.objects.get()
    late = queued(
        payload("user_prompt_submit", prompt="an old prompt", prompt_id="p-old"), 10, clock
    )
    response = send(hook, late)
    assert context_of(response) == ""
    after = Session.objects.get()
    assert after.prompt_count == before.prompt_count + 1
    assert after.recent_prompts[-1] == "an old prompt"
    assert after.last_activity_at == before.last_activity_at
    assert after.recovery_due  # still owed: the live prompt gets it
    assert context_of(send(hook, EVENTS["prompt"]()))
    assert Injection.objects.count() == 1


def test_a_replay_does_not_reopen_a_session_ended_for_idleness(hook, clock):
    worked_on(hook, clock)
    Session.objects.update(ended_at=clock.now, end_reason=Session.END_REASON_IDLE)
    send(hook, queued(payload("user_prompt_submit", prompt="late"), 5, clock))
    assert Session.objects.get().ended_at is not None
    send(hook, payload("user_prompt_submit", prompt="live"))
    assert Session.objects.get().ended_at is None


def test_a_replay_that_creates_its_session_starts_it_when_it_happened(hook, clock):
    late = queued(payload("user_prompt_submit", session_id="new-one"), 60, clock)
    send(hook, late)
    session = Session.objects.get(session_key="new-one")
    assert session.started_at == clock.now - timezone.timedelta(minutes=60)


@pytest.mark.parametrize(
    "bad",
    [
        "yesterday",
        "2026-13-01T00:00:00",
        5,
        "0001-01-01T00:00:00+05:00",  # before the epoch of every database: was a 500
        "2000-01-01T00:00:00+00:00",  # older than any outbox keeps
        "2999-01-01T00:00:00+00:00",  # a client clock far ahead
    ],
)
def test_a_malformed_queued_at_is_refused_with_a_reason(hook, bad):
    body = payload("user_prompt_submit")
    body["signet"] = {"queued_at": bad}
    response = send(hook, body)
    assert response.status_code == 400
    assert "queued_at" in response.json()["detail"]
    assert not Session.objects.exists()
