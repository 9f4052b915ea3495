"""The real Claude Code CLI (``tests/claude_cli.py``) with a service that hangs: it accepts
connections and never answers (issue #29, finding 5).

Goal: the hooks add at most 1.5 s to a turn and 3 s to a compaction, against the same run
without hooks, and a hook that just found the server hung spares the hooks of the next
minute the wait; what they carry is queued and reaches the service once it is back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from statistics import median

import pytest

from checkpoints.models import Session
from tests.claude_cli import ClaudeCode, HungServer, Run
from tests.model_api import text, tool_use

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TURN_BUDGET = 1.5
COMPACTION_BUDGET = 3.0
# Runs with and without hooks, interleaved: their medians are compared, as one run of the
# CLI alone varies by half a second on a busy machine.
ROUNDS = 3


def without_hooks(claude: ClaudeCode, prompt: str, *args: str) -> Run:
    """The same run with no hooks installed: the baseline the hooks' cost is judged by."""
    installed = claude.settings_file.read_text()
    claude.settings_file.write_text("{}\n")
    try:
        run = claude.run(prompt, *args)
    finally:
        claude.settings_file.write_text(installed)
    assert run.returncode == 0, run.stderr
    return run


def down_marker(claude: ClaudeCode) -> Path:
    """The client's mark of a server that let a hook wait without an answer."""
    return Path(claude.env["SIGNET_OUTBOX"] + ".down")


def the_minute_passes(claude: ClaudeCode) -> None:
    """Age the mark past its minute: the next hook tries the server again."""
    marker = down_marker(claude)
    assert marker.exists()  # a hook did mark the server
    stale = time.time() - 61
    os.utime(marker, (stale, stale))


def drain_the_outbox(claude: ClaudeCode, model_api) -> None:
    """Run short sessions until their hooks have replayed every queued event: each hook
    replays within its own short deadline, so a long outage takes a few."""
    outbox = Path(claude.env["SIGNET_OUTBOX"])
    for _ in range(8):
        if not outbox.read_text().strip():
            return
        model_api.script.append([text("Pong.")])
        assert claude.run("ping").returncode == 0
    raise AssertionError(f"still queued: {len(outbox.read_text().splitlines())} events")


def write_turn(model_api, path: str) -> None:
    """Script a turn of two responses: a Write of ``path``, then a line of text."""
    write = tool_use("Write", {"file_path": path, "content": "RATE = 20\n"})
    model_api.script.append([text("Writing it."), write])
    model_api.script.append([text("Done.")])


def test_a_hung_service_costs_a_turn_at_most_1_5_s_and_the_next_turn_nothing(
    claude, model_api, hook_service
):
    hook_service.stop()
    hung = HungServer(hook_service.port)
    try:
        baselines, turns = [], []
        for round_ in range(ROUNDS):
            write_turn(model_api, str(claude.project / f"notes{round_}.py"))
            baselines.append(without_hooks(claude, "Add a notes module"))
            down_marker(claude).unlink(missing_ok=True)  # each turn finds the server hung
            sent = hung.hook_requests
            write_turn(model_api, str(claude.project / f"vat{round_}.py"))
            turn = claude.run("Add a VAT rate constant")
            assert turn.returncode == 0, turn.stderr
            # SessionStart waited out its deadline; UserPromptSubmit, PostToolUse, Stop and
            # SessionEnd queued at once.
            assert hung.hook_requests == sent + 1
            turns.append(turn)
        added = median(t.seconds for t in turns) - median(b.seconds for b in baselines)
        assert added <= TURN_BUDGET, ([t.seconds for t in turns], [b.seconds for b in baselines])

        first = turns[0]
        model_api.script.append([text("Noted.")])
        second = claude.run("Round to two decimals", "--resume", first.session_id)
        assert second.returncode == 0, second.stderr
        assert hung.hook_requests == ROUNDS  # the same minute: no hook waited on the hung service
    finally:
        hung.stop()
    assert not Session.objects.exists()

    hook_service.start()
    the_minute_passes(claude)
    drain_the_outbox(claude, model_api)
    model_api.script.append([text("Carrying on.")])
    third = claude.run("Now the VAT breakdown", "--resume", first.session_id)
    assert third.returncode == 0, third.stderr

    session = Session.objects.get(session_key=first.session_id)
    assert session.prompt_count == 3
    assert session.recent_prompts == [
        "Add a VAT rate constant",
        "Round to two decimals",
        "Now the VAT breakdown",
    ]
    assert session.modified_files == [str(claude.project / "vat0.py")]
    assert session.git_branch == "feat/vat-breakdown"
    assert session.ended_at is not None
    for turn in turns[1:]:  # the other sessions of the outage, recorded and ended too
        other = Session.objects.get(session_key=turn.session_id)
        assert (other.prompt_count, other.ended_at is not None) == (1, True)


def test_a_hung_service_costs_a_compaction_at_most_3_s(claude, model_api, hook_service):
    hook_service.stop()
    hung = HungServer(hook_service.port)
    try:
        baselines, compactions = [], []
        for _ in range(ROUNDS):
            model_api.script.append([text("Hello.")])
            kept = claude.run("Add a VAT rate constant")
            assert kept.returncode == 0, kept.stderr
            baselines.append(without_hooks(claude, "/compact", "--resume", kept.session_id))
            down_marker(claude).unlink(missing_ok=True)  # each compaction finds it hung
            sent = hung.hook_requests
            compacted = claude.run("/compact", "--resume", kept.session_id)
            assert compacted.returncode == 0, compacted.stderr
            assert hung.hook_requests == sent + 1
            compactions.append(compacted)
        added = median(c.seconds for c in compactions) - median(b.seconds for b in baselines)
        assert added <= COMPACTION_BUDGET, (
            [c.seconds for c in compactions],
            [b.seconds for b in baselines],
        )
    finally:
        hung.stop()

    hook_service.start()
    the_minute_passes(claude)
    drain_the_outbox(claude, model_api)
    model_api.script.append([text("Carrying on.")])
    after = claude.run("Carry on", "--resume", kept.session_id)
    assert after.returncode == 0, after.stderr

    session = Session.objects.get(session_key=kept.session_id)
    assert session.compact_summary  # PostCompact, queued while the service hung, replayed
    assert session.checkpoints.filter(trigger="pre_compaction").exists()  # PreCompact's
    assert session.prompt_count == 2
