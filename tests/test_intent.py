"""The text rules of what a prompt says (``services/intent.py``): redirects, decisions."""

from __future__ import annotations

import pytest

from checkpoints.services.intent import decisions_add, decisions_in, redirect_of


@pytest.mark.parametrize(
    "prompt",
    [
        "New task: port the parser to Rust",
        "ok, change of plans: the billing page first",
        "Forget that, let's build the CLI",
        "Instead, let's write the docs",
        "let's switch to the billing module",
        "Now let's work on the signup page",
    ],
)
def test_a_redirect_says_so_and_names_the_new_work(prompt):
    assert redirect_of(prompt)


@pytest.mark.parametrize(
    "prompt",
    ["forget that", "now let's run the tests", "instead, use Redis", "add the signup route"],
)
def test_what_is_not_a_redirect(prompt):
    assert not redirect_of(prompt)


def test_decisions_are_the_sentences_that_state_a_rule_or_a_choice():
    prompt = (
        "Add rate limiting. Use Redis, not memcached. Don't touch the migrations!\n"
        "- always run ruff before committing\n"
        "It must be the cache. The API must stay backwards compatible.\n"
        "Should we use X, not Y? I don't know why. I prefer small commits.\n"
        "decision: keep SQLite for the tests\n"
        "use pytest instead of unittest\n"
        "I use the cache, not sure why it is slow.\n"
        "```\nnever = 1\n```\n"
        "    must_call() in pasted code\n"
        "Please use the British spelling :) Use the logs to find it.\n"
        "Let's go with option 2. Where do we go with this?\n"
    )
    assert decisions_in(prompt) == [
        "Use Redis, not memcached.",
        "Don't touch the migrations!",
        "always run ruff before committing",
        "The API must stay backwards compatible.",
        "I prefer small commits.",
        "decision: keep SQLite for the tests",
        "use pytest instead of unittest",
        "Please use the British spelling :) Use the logs to find it.",
        "Let's go with option 2.",
    ]


def test_a_decision_is_kept_to_300_characters():
    (long,) = decisions_in("Never " + "do that again " * 40)
    assert len(long) <= 300
    assert long.endswith("…")


def test_decisions_add_dedupes_newest_last_and_keeps_twenty():
    kept = decisions_add(["Never push to main.", "Use tabs"], ["never push to main"])
    assert kept == ["Use tabs", "never push to main"]
    many = decisions_add([], [f"never do thing {n}" for n in range(25)])
    assert len(many) == 20
    assert many[-1] == "never do thing 24"
