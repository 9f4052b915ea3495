"""The recovery context: sections, their order, budgets, branch warnings, and redaction on
the way out."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.api.serializers import RecoveryQuerySerializer
from checkpoints.models import HARNESS_CONTEXT_CAP_CHARS, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.recovery import HEADER, recovery_render
from tests.factories import CheckpointFactory

pytestmark = pytest.mark.django_db

OMITTED = "_Omitted for space:"
TASK = "Finish the Redis-backed rate limiter and make the auth tests pass. " * 4
LATEST = "Continue with the limiter, then rerun the auth suite"
MESSAGE = (
    "## Status\n\nThe limiter now counts in Redis.\n\n"
    + "\n".join(f"Line {n} of what I concluded about the limiter." for n in range(30))
    + "\nNext I will wire it into the signup route."
)
SUMMARY = "\n".join(
    f"{n}. Earlier the user asked for item {n} of the rate limiting work." for n in range(60)
)
SECTIONS = [
    "### Task",
    "### Latest request",
    "### Next steps",
    "### Decisions",
    "### Open questions and blockers",
    "### Modified files",
    "### Remembered notes",
    "### Recent prompts",
    "### Last assistant message",
    "### Compaction summary",
]


def big_checkpoint(owner, **fields):
    values = {
        "trigger": Trigger.PRE_COMPACTION,
        "current_task": TASK,
        "next_steps": [f"Next step {n}: wire the limiter into route {n}" for n in range(40)],
        "decisions": [f"Decision {n}: use a fixed window of {n} minutes" for n in range(40)],
        "blockers": ["CI runner lacks Redis"],
        "open_questions": ["Should admins bypass the limit?"],
        "modified_files": [f"/home/alice/projects/webapp/src/file_{n}.ts" for n in range(50)],
        "recent_remembers": [
            f"note {n}: staging Redis listens on port 63{n:02}" for n in range(10)
        ],
        "recent_prompts": [f"prompt number {n} about the limiter" for n in range(9)] + [LATEST],
        "last_assistant_message": MESSAGE,
        "git_branch": "feat/login-rate-limit",
    }
    return CheckpointFactory(session__owner=owner, **{**values, **fields})


def candidate_lines(checkpoint, summary=""):
    """Every whole line the renderer may emit from this checkpoint's fields."""
    lines = {f"- {s}" for s in checkpoint.next_steps + checkpoint.decisions}
    lines |= {f"- Blocker: {s}" for s in checkpoint.blockers}
    lines |= {f"- Open: {s}" for s in checkpoint.open_questions}
    lines |= {f"- {s}" for s in checkpoint.modified_files + checkpoint.recent_prompts}
    lines |= {f"- {s}" for s in checkpoint.recent_remembers}
    text = checkpoint.last_assistant_message + "\n" + summary
    lines |= {f"> {line}" for line in text.splitlines() if line.strip()}
    return lines


def render(checkpoint, budget=None, config=None, **options):
    config = config or config_get()
    if budget is not None:
        config = copy.copy(config)
        config.recovery_budget_chars = config.inject_budget_chars = budget
    return recovery_render(
        checkpoint=checkpoint, match="session", config=config, now=timezone.now(), **options
    )


def assert_well_formed(context, checkpoint, limit, summary=""):
    """Within ``limit``, the task first, whole lines only, the omitted line when cut, for a
    checkpoint with data for every section."""
    text = context.text
    lines = text.splitlines()
    assert len(text) <= limit
    assert lines[0] == HEADER
    titles = [line for line in lines if line.startswith("### ")]
    assert titles[0] == "### Task"
    task = lines[lines.index("### Task") + 1]
    assert TASK.startswith(task.removesuffix("…").strip()), task
    assert len(task) >= min(60, len(TASK.strip()))
    # In priority order, and none while one above it is missing.
    expected = SECTIONS if summary else SECTIONS[:-1]
    assert titles == expected[: len(titles)]
    allowed = candidate_lines(checkpoint, summary)
    for line in lines:
        if line.startswith(("- ", "> ")):
            assert line in allowed, f"cut mid-line: {line!r}"
    if context.omitted:
        assert lines[-1].startswith(OMITTED)
    else:
        assert not any(line.startswith(OMITTED) for line in lines)


def test_allowed_budgets_all_hold_and_all_carry_the_task(owner):
    """Every budget the API accepts, from its minimum to its maximum."""
    field = RecoveryQuerySerializer().fields["budget"]
    low, high = field.min_value, field.max_value
    assert (low, high) == (200, HARNESS_CONTEXT_CAP_CHARS - 1)
    checkpoint = big_checkpoint(owner)
    full = render(checkpoint, budget=high, compact_summary=SUMMARY)
    budgets = [*range(low, low + 120), *range(low + 120, high + 1, 61), high]
    for budget in budgets:
        context = render(checkpoint, budget=budget, compact_summary=SUMMARY)
        assert_well_formed(context, checkpoint, budget, SUMMARY)
        if len(full.text) <= budget:
            assert context.text == full.text
        else:
            assert context.omitted


@pytest.mark.parametrize("recovery_budget", [200, 350, 600, 1000, 2000, 4000, 9000, 9999])
@pytest.mark.parametrize("inject_budget", [200, 1500, 9999])
def test_budgets_hold_for_every_config_value(owner, recovery_budget, inject_budget):
    config = config_get()
    config.recovery_budget_chars = recovery_budget
    config.inject_budget_chars = inject_budget
    checkpoint = big_checkpoint(owner)
    context = render(checkpoint, config=config)
    limit = min(recovery_budget, inject_budget)
    assert len(context.text) < HARNESS_CONTEXT_CAP_CHARS
    assert_well_formed(context, checkpoint, limit)


def test_sections_come_in_priority_order_and_each_appears_with_its_data(owner):
    checkpoint = big_checkpoint(owner)
    text = render(checkpoint, budget=9999, compact_summary=SUMMARY).text
    positions = [text.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    assert "- Blocker: CI runner lacks Redis" in text
    assert "- Open: Should admins bypass the limit?" in text
    assert "> The limiter now counts in Redis." in text
    assert "> ## Status" in text  # the message's own heading cannot open a section
    assert "> 0. Earlier the user asked for item 0" in text


def test_a_section_without_data_is_left_out(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner, current_task="Ship the export", recent_prompts=["Ship the export"]
    )
    text = render(checkpoint).text
    assert "### Task\nShip the export" in text
    assert text.count("Ship the export") == 1  # not again as the latest request or a prompt
    for title in SECTIONS[1:]:
        assert title not in text


def test_every_section_gets_its_first_lines_before_any_gets_more(owner):
    text = render(big_checkpoint(owner), budget=2000).text
    for title in SECTIONS[:-1]:  # the checkpoint has no compaction summary
        assert title in text
    assert "- note 9: staging Redis listens on port 6309" in text  # the newest note first
    assert "- prompt number 8 about the limiter" in text  # the newest prompt after LATEST
    assert text.index(f"### Latest request\n{LATEST}") < text.index("### Next steps")


@pytest.mark.parametrize("budget", [200, 300, 500])
def test_a_small_budget_still_carries_the_task(owner, budget):
    context = render(big_checkpoint(owner), budget=budget)
    lines = context.text.splitlines()
    assert lines[:3] in (
        [HEADER, "", "### Task"],
        [HEADER, "From a pre-compaction checkpoint of this session, just now.", ""],
    )
    assert "Finish the Redis-backed rate limiter" in context.text
    assert lines[-1].startswith(OMITTED)
    assert "task (shortened)" in context.omitted  # the task is longer than half of these


def test_the_fullest_frame_names_the_checkpoint_and_the_api(owner):
    text = render(big_checkpoint(owner), budget=2000).text
    assert "Recovered from a pre-compaction checkpoint of this session" in text
    assert "/api/checkpoints/" in text.splitlines()[-1]
    assert "recent prompts" in text.splitlines()[-1]


def test_age_trigger_and_branch_warning(owner):
    checkpoint = big_checkpoint(owner)
    checkpoint.created_at = timezone.now() - timedelta(hours=3)
    text = recovery_render(
        checkpoint=checkpoint,
        match="project",
        config=config_get(),
        now=timezone.now(),
        current_branch="main",
    ).text
    assert "pre-compaction checkpoint" in text
    assert "3 h ago" in text
    assert "Warning: that checkpoint was taken on branch `feat/login-rate-limit`" in text


def test_duplicates_are_shown_once(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        current_task="Ship the export",
        next_steps=["Backfill", "Backfill"],
        recent_remembers=["port 6380", "port 6380"],
        recent_prompts=["again", "again", "Now the CSV part", "# port 6380"],
    )
    text = render(checkpoint).text
    assert text.count("- Backfill") == 1
    assert text.count("port 6380") == 1  # the note, not its "# …" prompt again
    assert "### Latest request\nNow the CSV part" in text  # the last one made a note
    assert text.count("again") == 1


def test_secrets_are_redacted_on_the_way_out_even_if_stored(owner):
    # Rows written before a redaction rule existed still must not leak, from any section.
    github = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    stripe = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    aws = "AKIAQ3EGSMTLNYWXJ5PV"
    checkpoint = CheckpointFactory(
        session__owner=owner,
        current_task=f"Deploy with AWS key {aws} and token {github}",
        next_steps=[f"export STRIPE_KEY={stripe}"],
        decisions=[f"Use token {github} for CI"],
        blockers=[f"the key {aws} expired"],
        recent_remembers=[f"the deploy token is {github}"],
        recent_prompts=[f"use {stripe} for the test", "ok"],
        last_assistant_message=f"Set STRIPE_KEY={stripe} and pushed with {github}.",
    )
    context = render(checkpoint, budget=9999, compact_summary=f"The user gave the key {aws}.")
    for title in set(SECTIONS) - {"### Modified files"}:
        assert title in context.text
    for secret in (github, stripe, aws, "ghp_a1B2", "sk_live_4eC3"):
        assert secret not in context.text
    assert context.text.count("[REDACTED]") >= 9
