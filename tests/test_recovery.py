"""The recovery context: budgets, priorities, branch warnings, and redaction on the way out."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.models import HARNESS_CONTEXT_CAP_CHARS, Trigger
from checkpoints.services.config import config_get
from checkpoints.services.recovery import HEADER, recovery_render
from tests.factories import CheckpointFactory

pytestmark = pytest.mark.django_db


def big_checkpoint(owner, **fields):
    return CheckpointFactory(
        session__owner=owner,
        trigger=Trigger.PRE_COMPACTION,
        current_task="Finish the Redis-backed rate limiter and make the auth tests pass. " * 4,
        next_steps=[f"Next step {n}: wire the limiter into route {n}" for n in range(40)],
        decisions=[f"Decision {n}: use a fixed window of {n} minutes" for n in range(40)],
        blockers=["CI runner lacks Redis"],
        open_questions=["Should admins bypass the limit?"],
        modified_files=[f"/home/alice/projects/webapp/src/file_{n}.ts" for n in range(50)],
        recent_prompts=[f"prompt number {n} about the limiter" for n in range(10)],
        git_branch="feat/login-rate-limit",
        **fields,
    )


def candidate_lines(checkpoint):
    """Every whole line the renderer may emit from this checkpoint's fields."""
    lines = {checkpoint.current_task.strip()}
    lines |= {f"- {s}" for s in checkpoint.next_steps + checkpoint.decisions}
    lines |= {f"- Blocker: {s}" for s in checkpoint.blockers}
    lines |= {f"- Open: {s}" for s in checkpoint.open_questions}
    lines |= {f"- {s}" for s in checkpoint.modified_files + checkpoint.recent_prompts}
    return lines


@pytest.mark.parametrize("recovery_budget", [200, 350, 600, 1000, 2000, 4000, 9000, 9999])
@pytest.mark.parametrize("inject_budget", [200, 1500, 9999])
def test_budgets_hold_for_every_config_value(owner, recovery_budget, inject_budget):
    config = config_get()
    config.recovery_budget_chars = recovery_budget
    config.inject_budget_chars = inject_budget
    checkpoint = big_checkpoint(owner)
    context = recovery_render(
        checkpoint=checkpoint, match="session", config=config, now=timezone.now()
    )
    limit = min(recovery_budget, inject_budget)
    assert len(context.text) <= limit
    assert len(context.text) < HARNESS_CONTEXT_CAP_CHARS
    allowed = candidate_lines(checkpoint)
    for line in context.text.splitlines():
        if line.startswith("- "):
            assert line in allowed, f"cut mid-line: {line!r}"
    if limit >= 600:
        assert context.text.startswith(HEADER)
        assert "### Task" in context.text
    roomy = copy.copy(config)
    roomy.recovery_budget_chars = roomy.inject_budget_chars = 9999
    full = recovery_render(checkpoint=checkpoint, match="session", config=roomy, now=timezone.now())
    if len(full.text) > limit:
        assert context.omitted
        if limit >= 600:  # below that only the header fits
            assert context.text.splitlines()[-1].startswith("_Omitted for space:")
    else:
        assert context.text == full.text
        assert not context.omitted


def test_sections_come_in_priority_order(owner):
    config = config_get()
    config.recovery_budget_chars = 9000
    checkpoint = big_checkpoint(owner)
    text = recovery_render(
        checkpoint=checkpoint, match="session", config=config, now=timezone.now()
    ).text
    order = [
        "### Task",
        "### Next steps",
        "### Decisions",
        "### Open questions and blockers",
        "### Modified files",
        "### Recent prompts",
    ]
    positions = [text.index(title) for title in order]
    assert positions == sorted(positions)


def test_small_budget_keeps_the_task_and_names_what_was_left_out(owner):
    config = config_get()
    config.recovery_budget_chars = 700
    text = recovery_render(
        checkpoint=big_checkpoint(owner), match="session", config=config, now=timezone.now()
    ).text
    assert "Finish the Redis-backed rate limiter" in text
    assert "recent prompts" in text.splitlines()[-1]
    assert "/api/checkpoints/" in text.splitlines()[-1]


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


def test_secrets_are_redacted_on_the_way_out_even_if_stored(owner):
    # Rows written before a redaction rule existed still must not leak.
    checkpoint = CheckpointFactory(
        session__owner=owner,
        current_task="Deploy with AWS key AKIAQ3EGSMTLNYWXJ5PV and token ghp_"
        + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        next_steps=["export STRIPE_KEY=sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"],
    )
    text = recovery_render(
        checkpoint=checkpoint, match="session", config=config_get(), now=timezone.now()
    ).text
    assert "AKIAQ3EGSMTLNYWXJ5PV" not in text
    assert "ghp_a1B2" not in text
    assert "sk_live_4eC3" not in text
    assert "[REDACTED]" in text
