"""Context pressure: the usage a client reports, the reminders it earns on the next prompt,
the token-threshold checkpoints, and whether the agent acted on a reminder."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from checkpoints.models import Checkpoint, ContinuityConfig, Session
from checkpoints.services.config import config_get
from tests.hookutil import configure, context_of, payload, send, throttle_statements

pytestmark = pytest.mark.django_db

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
NOTICE = "Context note:"
WARNING = "Context warning:"
CRITICAL = "Context critical:"


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest", "write", "read")


def stop(hook: Any, tokens: Any, model: str = "claude-sonnet-4-5-20250929", **more: Any) -> Any:
    usage = {"context_tokens": tokens, "model": model}
    response = send(hook, payload("stop", signet={"usage": usage, **more}))
    assert response.status_code == 200, response.content
    return response


def prompt(hook: Any, text: str = "go on") -> str:
    response = send(hook, payload("user_prompt_submit", prompt=text))
    assert response.status_code == 200, response.content
    return context_of(response)


def session() -> Session:
    return Session.objects.get(session_key=SESSION)


def compact(hook: Any) -> None:
    for name in ("pre_compact_auto", "session_start_compact", "post_compact_manual"):
        body = payload(name, transcript_path="/nonexistent/t.jsonl")
        assert send(hook, body).status_code == 200


def started(hook: Any) -> None:
    send(hook, payload("session_start_startup"))
    prompt(hook, "Move the rate limiter to Redis")


# --- the usage a client sends ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "problem"),
    [
        ("lots", "'signet.usage' must be an object."),
        ({"context_tokens": "100"}, "'signet.usage.context_tokens' must be a number."),
        ({"context_tokens": True}, "'signet.usage.context_tokens' must be a number."),
        ({"context_tokens": [1]}, "'signet.usage.context_tokens' must be a number."),
        ({"context_tokens": -1}, "'signet.usage.context_tokens' must not be negative."),
        ({"context_tokens": 10, "model": 4}, "'signet.usage.model' must be a string, not int."),
    ],
)
def test_a_bad_usage_is_refused_with_400(hook, usage, problem):
    response = send(hook, payload("stop", signet={"usage": usage}))

    assert response.status_code == 400
    assert problem in str(response.json())
    assert not Session.objects.exists()


def test_the_usage_is_stored_against_the_models_window(hook):
    started(hook)

    stop(hook, 50_000.0)  # any number: a harness counting tokens itself may send a float

    row = session()
    assert row.context_tokens == 50_000
    assert row.context_window == 200_000
    assert row.context_percent == 25.0
    assert row.model == "claude-sonnet-4-5-20250929"

    stop(hook, 10**12)  # bounded to the column
    assert session().context_tokens == 2**31 - 1


def test_a_1m_model_or_more_tokens_than_the_default_window_use_the_long_window(hook):
    send(hook, payload("session_start_startup", model="claude-sonnet-4-5[1m]"))
    stop(hook, 300_000)
    row = session()
    assert row.context_window == 1_000_000
    assert row.context_percent == 30.0
    assert row.model == "claude-sonnet-4-5[1m]"  # the transcript's name has no [1m]

    other = payload("stop", session_id="other-session")
    other["signet"] = {"usage": {"context_tokens": 250_000, "model": "claude-opus-4-1"}}
    send(hook, other)
    other["signet"]["usage"]["context_tokens"] = 150_000  # after a compaction: still long
    send(hook, other)
    row = Session.objects.get(session_key="other-session")
    assert row.context_window == 1_000_000
    assert row.context_percent == 15.0


def test_the_windows_come_from_the_settings(hook):
    configure(context_window_default=100_000)
    started(hook)

    stop(hook, 80_000)

    assert session().context_percent == 80.0
    assert WARNING in prompt(hook)


def test_a_replayed_usage_is_stale_and_ignored(hook):
    started(hook)
    stop(hook, 20_000)

    stop(hook, 190_000, queued_at=(timezone.now() - timedelta(hours=1)).isoformat())

    assert session().context_tokens == 20_000


# --- reminders --------------------------------------------------------------------------------


def test_reminders_fire_once_per_threshold_on_the_next_prompt(hook):
    started(hook)
    stop(hook, 90_000)  # 45 %
    assert prompt(hook) == ""

    stop(hook, 110_000)  # 55 %: the notice, on the next prompt only
    assert context_of(stop(hook, 110_000)) == ""  # Stop itself carries none
    first = prompt(hook)
    assert first.startswith(NOTICE)
    assert "55%" in first
    assert prompt(hook) == ""
    stop(hook, 140_000)  # 70 %: still the notice's band
    assert prompt(hook) == ""

    stop(hook, 150_000)  # 75 %
    assert prompt(hook).startswith(WARNING)
    stop(hook, 182_000)  # 91 %
    critical = prompt(hook)
    assert critical.startswith(CRITICAL)
    assert "compaction is imminent" in critical
    assert "session_digest now" in critical
    stop(hook, 195_000)
    assert prompt(hook) == ""
    assert session().pressure_reminder_count == 3


def test_a_jump_past_two_thresholds_gives_only_the_highest_reminder(hook):
    started(hook)
    stop(hook, 184_000)  # 92 %

    assert prompt(hook).startswith(CRITICAL)
    stop(hook, 160_000)  # 80 %: below critical now, but warning was passed in this cycle
    assert prompt(hook) == ""
    assert session().pressure_reminder_count == 1


def test_reminders_fire_again_after_a_compaction(hook):
    started(hook)
    stop(hook, 120_000)
    assert prompt(hook).startswith(NOTICE)
    stop(hook, 150_000)
    assert prompt(hook).startswith(WARNING)

    compact(hook)
    row = session()
    assert row.context_tokens is None
    assert row.context_percent is None
    assert row.pressure_reminders_sent == 0
    prompt(hook)  # the compaction's recovery was injected at its SessionStart
    stop(hook, 40_000)  # 20 %: the compacted context
    assert prompt(hook) == ""

    stop(hook, 110_000)
    assert prompt(hook).startswith(NOTICE)
    stop(hook, 150_000)
    assert prompt(hook).startswith(WARNING)


def test_the_texts_and_thresholds_come_from_the_settings(hook):
    configure(
        pressure_notice_percent=30,
        pressure_notice_text="Half-way-ish: {percent}% ({tokens} of {window}).",
    )
    started(hook)

    stop(hook, 62_000)

    assert prompt(hook) == "Half-way-ish: 31% (62,000 of 200,000)."


def test_a_reminder_and_a_recovery_on_the_same_prompt_both_fit_the_budget(hook):
    configure(
        pressure_critical_text="X" * 1000, recovery_budget_chars=8600, inject_budget_chars=9000
    )
    started(hook)
    hook.post(
        "/api/checkpoints/",
        {"session_key": SESSION, "current_task": "Move the rate limiter to Redis " * 200},
        format="json",
    )
    # PreCompact then PostCompact, its SessionStart lost: the next prompt owes the recovery.
    send(hook, payload("pre_compact_auto", transcript_path="/nonexistent/t.jsonl"))
    send(hook, payload("post_compact_manual"))
    stop(hook, 190_000)

    context = prompt(hook)

    assert context.startswith("## Session Recovery Context")
    assert "\n\nXXX" in context
    assert len(context) <= 9000 < 10_000
    assert session().pressure_reminder_level == "critical"


def test_a_prompt_carrying_a_reminder_keeps_the_hot_paths_query_count(
    hook, django_assert_num_queries
):
    started(hook)
    stop(hook, 184_000)
    config_get()
    # As in test_hot_path: the throttle's upsert (PostgreSQL), the session's read and its
    # write-back. The reminder reads and writes only the session row.
    with django_assert_num_queries(len(throttle_statements()) + 2):
        context = prompt(hook, "next step please")
    assert context.startswith(CRITICAL)


# --- token-threshold checkpoints ------------------------------------------------------------


def periodic() -> int:
    return Checkpoint.objects.filter(trigger="periodic").count()


def test_token_thresholds_mark_a_checkpoint_once_per_threshold_per_cycle(hook):
    started(hook)
    assert periodic() == 0

    stop(hook, 60_000)  # 30 %: past 25
    assert periodic() == 1
    row = session()
    assert row.checkpoint_pending_since is None  # written: the debounce is 0 in the tests
    # The prompt interval counts afresh from here: it came first.
    assert row.last_checkpoint_prompt == row.prompt_count
    stop(hook, 80_000)  # 40 %
    assert periodic() == 1
    stop(hook, 160_000)  # 80 %: past 50 and 75 at once, one checkpoint
    assert periodic() == 2
    stop(hook, 190_000)
    assert periodic() == 2
    assert Checkpoint.objects.filter(trigger="periodic").latest().context_tokens == 160_000

    compact(hook)
    stop(hook, 60_000)
    assert periodic() == 3


def test_token_thresholds_come_from_the_settings(hook):
    configure(token_checkpoint_percents="")
    started(hook)

    stop(hook, 190_000)

    assert periodic() == 0


@pytest.mark.parametrize("value", ["50, 25", "0, 10", "25; 50", "1,2,3,4,5,6,7,8,9", "101"])
def test_bad_token_thresholds_are_refused(value):
    config = ContinuityConfig(token_checkpoint_percents=value)
    with pytest.raises(ValidationError):
        config.full_clean()


# --- whether the agent acted ----------------------------------------------------------------


def agent_digest(hook: Any) -> None:
    response = hook.post(
        "/api/checkpoints/",
        {"session_key": SESSION, "trigger": "agent", "digest": "Limiter on Redis; tests next."},
        format="json",
    )
    assert response.status_code == 201, response.content


def test_an_agent_checkpoint_within_the_turns_after_a_reminder_is_recorded(hook):
    started(hook)
    stop(hook, 184_000)
    prompt(hook)
    assert session().pressure_agent_acted is None
    prompt(hook)

    agent_digest(hook)  # within 3 turns

    row = session()
    assert row.pressure_agent_acted is True
    assert row.pressure_acted_count == 1
    body = hook.get(f"/api/sessions/{SESSION}/").json()
    assert body["pressure_reminder_level"] == "critical"
    assert body["pressure_agent_acted"] is True
    assert body["pressure_reminder_count"] == 1
    assert body["pressure_acted_count"] == 1
    assert body["context_percent"] == 92.0


def test_no_agent_checkpoint_within_the_turns_is_recorded_too(hook, client, owner):
    started(hook)
    stop(hook, 120_000)
    prompt(hook)  # the reminder: turn 1
    prompt(hook)
    prompt(hook)
    assert session().pressure_agent_acted is None
    prompt(hook)  # the 4th prompt: three turns went by

    assert session().pressure_agent_acted is False
    agent_digest(hook)  # too late: not counted, nor is the explicit capture ever
    row = session()
    assert row.pressure_agent_acted is False
    assert row.pressure_acted_count == 0

    client.force_login(owner)
    page = client.get(reverse("session_detail", args=[row.pk])).content.decode()
    assert "no digest followed" in page
    assert "60%" in page


def test_an_explicit_checkpoint_is_not_the_agent_acting(hook):
    started(hook)
    stop(hook, 184_000)
    prompt(hook)

    hook.post("/api/checkpoints/", {"session_key": SESSION, "digest": "by hand"}, format="json")

    assert session().pressure_agent_acted is None


def test_a_headless_session_on_a_native_1m_model_counts_against_1m(hook):
    # A headless SessionStart names no model; the transcript names it without its [1m].
    started(hook)
    stop(hook, 160_000, model="claude-opus-4-8")

    row = session()
    assert (row.context_window, row.context_percent) == (1_000_000, 16.0)
    assert WARNING not in prompt(hook)

    # A model whose window is 200k unless it is marked still warns at 75 % of it.
    send(hook, payload("session_start_startup", session_id="sonnet"))
    other = payload("stop", session_id="sonnet")
    other["signet"] = {"usage": {"context_tokens": 160_000, "model": "claude-sonnet-4-5"}}
    send(hook, other)
    assert Session.objects.get(session_key="sonnet").context_window == 200_000


def test_the_claude_code_adapter_owns_the_long_context_rule():
    from checkpoints.harnesses.claude_code import ClaudeCodeAdapter
    from checkpoints.harnesses.gemini import GeminiAdapter

    adapter = ClaudeCodeAdapter()
    assert adapter.long_context("claude-sonnet-4-5[1m]")
    assert adapter.long_context("us.anthropic.claude-opus-4-8-v1:0")
    assert not adapter.long_context("claude-sonnet-4-5-20250929")
    assert not GeminiAdapter().long_context("claude-opus-4-8")
