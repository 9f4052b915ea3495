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
WEBAPP = "/home/alice/projects/webapp"
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
GOAL = "Add rate limiting to POST /api/login without breaking the mobile app's retries"
NOW = "Switch the counter store to Redis"
SECTIONS = [
    "### Goal",
    "### Now",
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
        "goal": TASK,
        "current_task": NOW,
        "next_steps": [f"Next step {n}: wire the limiter into route {n}" for n in range(40)],
        "decisions": [f"Decision {n}: use a fixed window of {n} minutes" for n in range(40)],
        "blockers": ["CI runner lacks Redis"],
        "open_questions": ["Should admins bypass the limit?"],
        "modified_files": [f"{WEBAPP}/src/file_{n}.ts" for n in range(50)],
        "recent_remembers": [
            f"note {n}: staging Redis listens on port 63{n:02}" for n in range(10)
        ],
        "recent_prompts": [f"prompt number {n} about the limiter" for n in range(9)] + [LATEST],
        "last_assistant_message": MESSAGE,
        "git_branch": "feat/login-rate-limit",
    }
    return CheckpointFactory(
        session__owner=owner, session__project_normalized=WEBAPP, **{**values, **fields}
    )


def candidate_lines(checkpoint, summary=""):
    """Every whole line the renderer may emit from this checkpoint's fields."""
    lines = {f"- {s}" for s in checkpoint.next_steps + checkpoint.decisions}
    lines |= {f"- Blocker: {s}" for s in checkpoint.blockers}
    lines |= {f"- Open: {s}" for s in checkpoint.open_questions}
    lines |= {f"- {s.removeprefix(WEBAPP + '/')}" for s in checkpoint.modified_files}
    lines |= {f"- {s}" for s in checkpoint.recent_prompts}
    lines |= {f"- {s}" for s in checkpoint.recent_remembers}
    text = checkpoint.last_assistant_message + "\n" + summary
    lines |= {f"> {line}" for line in text.splitlines() if line.strip()}
    return lines | {"> …"}  # between a message's opening and its closing lines


def render(checkpoint, budget=None, config=None, **options):
    config = config or config_get()
    if budget is not None:
        config = copy.copy(config)
        config.recovery_budget_chars = config.inject_budget_chars = budget
    return recovery_render(
        checkpoint=checkpoint, match="session", config=config, now=timezone.now(), **options
    )


def assert_well_formed(context, checkpoint, limit, summary=""):
    """Within ``limit``, the goal first, whole lines only, the omitted line when cut, for a
    checkpoint with data for every section."""
    text = context.text
    lines = text.splitlines()
    assert len(text) <= limit
    assert lines[0] == HEADER
    titles = [line for line in lines if line.startswith("### ")]
    assert titles[0] == "### Goal"
    task = lines[lines.index("### Goal") + 1]
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


def test_allowed_budgets_all_hold_and_all_carry_the_goal(owner):
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
    assert "### Goal\nShip the export" in text
    assert text.count("Ship the export") == 1  # not again as now, the latest request, a prompt
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
def test_a_small_budget_still_carries_the_goal(owner, budget):
    context = render(big_checkpoint(owner), budget=budget)
    lines = context.text.splitlines()
    assert lines[:3] in (
        [HEADER, "", "### Goal"],
        [
            HEADER,
            "From a pre-compaction checkpoint of this session, just now on "
            "`feat/login-rate-limit`.",
            "",
        ],
    )
    assert "Finish the Redis-backed rate limiter" in context.text
    assert lines[-1].startswith(OMITTED)
    assert "goal (shortened)" in context.omitted  # the goal is longer than half of these


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
    assert "3 h ago on `feat/login-rate-limit` after" in text
    assert "Warning: you are on `main`, another branch." in text


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
        goal=f"Deploy with AWS key {aws} and token {github}",
        current_task=f"Rotate the key {aws}",
        next_steps=[f"export STRIPE_KEY={stripe}"],
        decisions=[f"Use token {github} for CI"],
        blockers=[f"the key {aws} expired"],
        recent_remembers=[f"the deploy token is {github}"],
        recent_prompts=[f"use {stripe} for the test", f"and {github} for CI", "ok"],
        last_assistant_message=f"Set STRIPE_KEY={stripe} and pushed with {github}.",
    )
    context = render(checkpoint, budget=9999, compact_summary=f"The user gave the key {aws}.")
    for title in set(SECTIONS) - {"### Modified files"}:
        assert title in context.text
    for secret in (github, stripe, aws, "ghp_a1B2", "sk_live_4eC3"):
        assert secret not in context.text
    assert context.text.count("[REDACTED]") >= 11


# --- What a session is for, and what it is doing now (#30) ---------------------------------


def session_checkpoint(owner, **fields):
    return big_checkpoint(owner, goal=GOAL, current_task=NOW, **fields)


def titles_of(text):
    return [line for line in text.splitlines() if line.startswith("### ")]


def test_sections_go_goal_now_latest_request_then_the_rest(owner):
    text = render(session_checkpoint(owner), budget=9999, compact_summary=SUMMARY).text
    assert titles_of(text) == SECTIONS
    assert f"### Goal\n{GOAL}\n\n### Now\n{NOW}\n\n### Latest request\n{LATEST}\n" in text


def test_the_goal_leads_at_every_budget_from_200(owner):
    """Never dropped for the current to-do, shortened when it must be."""
    checkpoint = session_checkpoint(owner)
    for budget in [*range(200, 601), *range(601, 2001, 7), 2000]:
        context = render(checkpoint, budget=budget, compact_summary=SUMMARY)
        lines = context.text.splitlines()
        assert len(context.text) <= budget
        assert titles_of(context.text)[0] == "### Goal", budget
        goal = lines[lines.index("### Goal") + 1]
        assert GOAL.startswith(goal.removesuffix("…")), budget
        assert len(goal) >= min(60, len(GOAL)), budget
        assert titles_of(context.text) == SECTIONS[: len(titles_of(context.text))]


def test_without_a_stated_goal_the_oldest_request_kept_is_the_goal(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        current_task=NOW,
        recent_prompts=["# staging Redis is on 6380", GOAL, "go on", "now the signup route"],
        recent_remembers=["staging Redis is on 6380"],
    )
    text = render(checkpoint, budget=200).text
    assert titles_of(text)[0] == "### Goal"
    assert f"### Goal\n{GOAL}" in render(checkpoint).text


def test_now_and_the_latest_request_are_left_out_when_they_are_the_goal(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        goal=GOAL,
        current_task=GOAL,
        recent_prompts=[GOAL],
        next_steps=[GOAL, "Run the auth tests"],
        decisions=[GOAL, "Fixed window"],
    )
    text = render(checkpoint).text
    assert text.count(GOAL) == 1
    assert titles_of(text) == ["### Goal", "### Next steps", "### Decisions"]


def test_each_fact_is_said_once(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        goal=GOAL,
        current_task=LATEST,  # the to-do is what the user asked last
        recent_prompts=[GOAL, "Use a fixed window, not a sliding one", LATEST],
        next_steps=[LATEST, "Run the auth tests"],
        decisions=["Use a fixed window, not a sliding one"],
    )
    text = render(checkpoint).text
    for fact in (GOAL, LATEST, "Use a fixed window, not a sliding one", "Run the auth tests"):
        assert text.count(fact) == 1, fact
    assert f"### Now\n{LATEST}" in text
    assert "### Latest request" not in text
    assert "### Recent prompts" not in text


# --- The branch, paths, the last message ---------------------------------------------------


def test_the_branch_is_named_in_the_header_even_when_it_is_the_current_one(owner):
    checkpoint = session_checkpoint(owner, prompt_count=12)
    text = render(checkpoint, budget=9999, current_branch="feat/login-rate-limit").text
    assert "taken just now on `feat/login-rate-limit` after 12 prompts." in text
    assert "Warning" not in text
    short = render(checkpoint, budget=600, current_branch="feat/login-rate-limit").text
    assert short.splitlines()[1].startswith("From a pre-compaction checkpoint")
    assert "`feat/login-rate-limit`" in short.splitlines()[1]


def test_another_branch_is_named_once_with_a_warning(owner):
    checkpoint = session_checkpoint(owner)
    for budget in (9999, 600):
        text = render(checkpoint, budget=budget, current_branch="main").text
        assert text.count("feat/login-rate-limit") == 1
        assert "Warning: you are on `main`" in text


def test_modified_files_are_named_relative_to_the_project(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        session__project_normalized="/home/alice/src/shop",
        goal=GOAL,
        modified_files=[
            "/home/alice/src/shop/src/app.py",
            "/home/alice/src/shopping/notes.md",  # another folder that starts the same
            "/etc/hosts",
            "docs/setup.md",
        ],
        recent_prompts=["fix /home/alice/src/shop/src/app.py", "and run it"],
        last_assistant_message="Edited /home/alice/src/shop/src/app.py: done.",
    )
    text = render(checkpoint).text
    assert "### Modified files\n- docs/setup.md\n- /etc/hosts\n" in text
    assert "- ~/src/shopping/notes.md\n- src/app.py\n" in text  # in the home folder
    assert "fix src/app.py" in text
    assert "> Edited src/app.py: done." in text
    assert "/home/alice/src/shop/" not in text


CLOSING = "Shall I wire the limiter into the signup route next, or rerun the auth suite first?"
LONG_MESSAGE = (
    "I moved the limiter's counters to Redis.\n\n"
    + "\n".join(f"- detail {n} of the change to the limiter and its tests" for n in range(30))
    + f"\n\nAll auth tests pass against the real Redis. {CLOSING}"
)


def test_the_last_messages_closing_lines_are_kept_with_its_opening_when_room(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner, goal=GOAL, last_assistant_message=LONG_MESSAGE
    )
    text = render(checkpoint, budget=9999).text
    assert text.endswith(f"{CLOSING}")
    quoted = text[text.index("### Last assistant message") :].splitlines()[1:]
    assert quoted[0] == "> I moved the limiter's counters to Redis."
    assert quoted[-1].endswith(CLOSING)
    for budget in range(200, 1200, 7):
        text = render(checkpoint, budget=budget).text
        if "### Last assistant message" in text:
            quoted = text[text.index("### Last assistant message") :].splitlines()[1:]
            closing = [line for line in quoted if line.endswith(CLOSING)]
            assert closing, budget
            if quoted[0] == "> I moved the limiter's counters to Redis.":
                assert "> …" in quoted, budget


def test_a_long_closing_paragraph_keeps_its_end(owner):
    message = (
        "Done.\n\n" + "The limiter counts per IP in Redis with a fixed window. " * 12 + CLOSING
    )
    checkpoint = CheckpointFactory(session__owner=owner, goal=GOAL, last_assistant_message=message)
    text = render(checkpoint, budget=1000).text
    assert text.endswith(CLOSING)


def test_a_message_shown_whole_has_no_gap_mark_between_its_paragraphs(owner):
    message = "I updated scan.sh.\n\n**Secret Scanning**: enabled on push.\n\n" + CLOSING
    checkpoint = CheckpointFactory(session__owner=owner, goal=GOAL, last_assistant_message=message)
    text = render(checkpoint, budget=9999).text
    assert text.endswith(
        "### Last assistant message\n> I updated scan.sh.\n"
        f"> **Secret Scanning**: enabled on push.\n> {CLOSING}"
    )


@pytest.mark.parametrize("budget", [200, 2000])
def test_without_a_goal_or_a_prompt_what_is_in_progress_leads(owner, budget):
    checkpoint = CheckpointFactory(
        session__owner=owner, current_task=TASK, next_steps=["Run the auth tests"]
    )
    context = render(checkpoint, budget=budget)
    assert titles_of(context.text)[0] == "### Now"
    assert "Finish the Redis-backed rate limiter" in context.text
    assert ("now (shortened)" in context.omitted) == (budget == 200)


# --- The budget on real sessions' shapes (#30) ---------------------------------------------

ANSWERS = [
    f"Question {n}: should the limiter count per IP, per account, or per IP and account "
    f"together, given the mobile app's retries and the shared office NAT? → Per IP and "
    f"account together, with a higher limit for known office addresses and a note {n} in "
    "the runbook about how the counters reset after the window and what support should say"
    for n in range(5)
]
SUMMARY_STEPS = [
    f"**Step {n} of the plan**: rebuild the limiter's Redis client so that it reconnects "
    "after a failover, then rerun the auth suite against the staging cluster and compare "
    "the latencies with the numbers from last week before anything is merged into main; "
    "```bash; make test-auth; ```"
    for n in range(5)
]
FILES = [f"{WEBAPP}/src/limiter/part_{n}.ts" for n in range(5)]


def crowded_checkpoint(owner, **fields):
    values = {
        "goal": GOAL,
        "decisions": ANSWERS,
        "next_steps": SUMMARY_STEPS,
        "modified_files": FILES,
        "recent_prompts": [GOAL, LATEST],
    }
    return CheckpointFactory(
        session__owner=owner, session__project_normalized=WEBAPP, **{**values, **fields}
    )


def test_long_decisions_and_steps_leave_room_for_every_modified_file(owner):
    context = render(crowded_checkpoint(owner), budget=2000)
    text = context.text
    for path in FILES:
        assert f"- {path.removeprefix(WEBAPP + '/')}\n" in text, path
    section = text[text.index("### Decisions") : text.index("### Modified files")]
    decisions = [line for line in section.splitlines() if line.startswith("- ")]
    assert decisions
    assert all(len(line) <= 2 + 180 for line in decisions)
    # The answer is the decision: it keeps more of the line than the question.
    question, answer = decisions[0].split(" → ")
    assert len(answer) > len(question)
    assert answer.startswith("Per IP and account together")


def test_short_items_are_widened_when_the_budget_has_room(owner):
    text = render(crowded_checkpoint(owner), budget=9999).text
    for answer in ANSWERS:
        assert f"- {answer}\n" in text


def test_the_latest_request_is_the_last_one_that_says_something(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        goal=GOAL,
        recent_prompts=[GOAL, LATEST, "yes go on", "continue", "ok"],
    )
    text = render(checkpoint).text
    assert text.endswith(f"### Latest request\n{LATEST}")
    for prompt in ("yes go on", "continue", "ok"):
        assert prompt not in text.splitlines()
        assert f"- {prompt}" not in text.splitlines()


@pytest.mark.parametrize(
    ("project", "home"),
    [("/Users/bob/code/app", "/Users/bob"), ("/home/bob/code/app", "/home/bob")],
)
def test_paths_in_the_projects_home_folder_are_named_from_it(owner, project, home):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        session__project_normalized=project,
        goal=GOAL,
        modified_files=[
            f"{home}/.claude/settings.json",
            f"{home}by/notes.md",  # another user's folder that starts the same
            "/opt/tool/config.toml",
            f"{project}/src/app.py",
        ],
        last_assistant_message=f"Edited {home}/.claude/settings.json and src/app.py.",
    )
    text = render(checkpoint).text
    assert (
        "### Modified files\n- src/app.py\n- /opt/tool/config.toml\n"
        f"- {home}by/notes.md\n- ~/.claude/settings.json\n"
    ) in text
    assert "> Edited ~/.claude/settings.json and src/app.py." in text


def test_a_project_outside_a_home_folder_keeps_absolute_paths(owner):
    checkpoint = CheckpointFactory(
        session__owner=owner,
        session__project_normalized="/srv/app",
        goal=GOAL,
        modified_files=["/Users/Shared/notes.md", "/home/bob/.bashrc", "/srv/app/main.py"],
    )
    text = render(checkpoint).text
    assert "- main.py\n- /home/bob/.bashrc\n- /Users/Shared/notes.md" in text


PARAGRAPH = " ".join(
    f"Sentence {n} of the request says what the limiter must do for the mobile app."
    for n in range(12)
)


def test_a_long_goal_is_cut_at_a_sentence_within_a_quarter_of_the_budget(owner):
    checkpoint = CheckpointFactory(session__owner=owner, goal=PARAGRAPH, next_steps=["Ship"])
    for budget in (1000, 2000, 3000):
        context = render(checkpoint, budget=budget)
        lines = context.text.splitlines()
        goal = lines[lines.index("### Goal") + 1]
        assert len(goal) <= max(400, budget // 4), budget
        assert goal.endswith("mobile app. …"), goal
        assert PARAGRAPH.startswith(goal.removesuffix(" …"))
        assert "goal (shortened)" in context.omitted
        assert "- Ship" in context.text


def test_an_item_of_joined_lines_shows_its_first_one(owner):
    task = (
        "**Just before the summary**, I was debugging why the applet shows no readings. "
        "Specifically:; the panel shows two bars; the backends start ten times; ```bash; "
        "ps aux | grep cosmic-panel; ```; " + "; ".join(f"detail {n}" for n in range(40))
    )
    checkpoint = CheckpointFactory(
        session__owner=owner,
        goal=GOAL,
        current_task=task,
        next_steps=[SUMMARY_STEPS[0], "Fixed window; 5 attempts per IP"],
    )
    text = render(checkpoint, budget=9999).text
    assert (
        "### Now\n**Just before the summary**, I was debugging why the applet shows no "
        "readings. Specifically: the panel shows two bars\n"
    ) in text
    assert "- **Step 0 of the plan**: rebuild the limiter's Redis client" in text
    assert "```bash" not in text
    assert "- Fixed window; 5 attempts per IP" in text.splitlines()  # short: whole


CLAUDE_SUMMARY = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\nAnalysis:\nLet me chronologically analyze the "
    "conversation:\n\n1. **Session start**: the user asked for a limiter.\n\nSummary:\n"
    "1. Primary Request and Intent:\n   Add rate limiting to POST /api/login.\n"
    "2. Pending Tasks:\n   - Wire the limiter into signup\n"
)


@pytest.mark.parametrize(
    "summary",
    [
        CLAUDE_SUMMARY,
        "<analysis>\nLet me chronologically analyze the conversation.\n</analysis>\n\n"
        "<summary>\n1. Primary Request and Intent:\n   Add rate limiting to POST /api/login.\n"
        "</summary>",
    ],
)
def test_the_compaction_summary_is_quoted_from_its_sections(owner, summary):
    checkpoint = CheckpointFactory(session__owner=owner, goal=GOAL)
    text = render(checkpoint, compact_summary=summary).text
    assert text.endswith(
        "### Compaction summary\n> 1. Primary Request and Intent:\n"
        "> Add rate limiting to POST /api/login."
        + (
            "\n> 2. Pending Tasks:\n> - Wire the limiter into signup"
            if "Pending" in summary
            else ""
        )
    )
    for noise in ("continued from a previous", "Analysis", "analyze", "summary>"):
        assert noise not in text


def test_a_summary_heading_late_in_a_summary_of_another_shape_keeps_what_is_before_it(owner):
    summary = "The user asked for rate limiting on POST /api/login.\n\n## Summary\nDone so far."
    checkpoint = CheckpointFactory(session__owner=owner, goal=GOAL)
    text = render(checkpoint, compact_summary=summary).text
    assert "> The user asked for rate limiting on POST /api/login." in text
    assert "> Done so far." in text
