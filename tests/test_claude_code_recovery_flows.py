"""The real Claude Code CLI (``tests/claude_cli.py``) against the real service: a big edit's
hook body, the recovery context across headless resumes, compactions and clears, and which
session a new one recovers from (issue #29, findings 6-8)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from checkpoints.models import Session
from checkpoints.services.recovery import HEADER
from tests.model_api import COMPACT_MARK, ModelAPI, text, tool_use
from tests.test_claude_code_outage import Tui, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_write_of_a_600_kb_file_lands_among_the_sessions_modified_files(claude, model_api):
    path = claude.project / "fixtures.sql"
    line = "INSERT INTO invoices (id, vat) VALUES (1, 'VAT \"20%\"');\n"
    content = line * (600_000 // len(line))
    model_api.script.append([text("Writing the fixtures."), tool_use("Write", {
        "file_path": str(path), "content": content,
    })])  # fmt: skip
    model_api.script.append([text("Wrote fixtures.sql.")])

    run = claude.run("Write the invoice fixtures")

    assert run.returncode == 0, run.stderr
    assert path.read_text() == content
    session = Session.objects.get(session_key=run.session_id)
    assert str(path) in session.modified_files


def _blocks(body: dict[str, Any]) -> int:
    return ModelAPI.request_text(body).count(HEADER)


def test_the_model_never_holds_more_than_one_recovery_block(claude, model_api):
    """Startup, three headless resumes, /compact, --continue, a new session, /clear and a
    prompt after it: at most one ``## Session Recovery Context`` in every request the model
    received; exactly one in the first request after the compaction."""
    model_api.script.append([text("Writing."), tool_use("Write", {
        "file_path": str(claude.project / "vat.py"), "content": "RATE = 20\n",
    })])  # fmt: skip
    model_api.script.append([text("Wrote vat.py.")])
    first = claude.run("Add a VAT rate constant")
    assert first.returncode == 0, first.stderr
    session_id = first.session_id
    for number in range(3):
        resumed = claude.run(f"Carry on with step {number}", "--resume", session_id)
        assert (resumed.returncode, resumed.session_id) == (0, session_id), resumed.stderr
    compacted = claude.run("/compact", "--resume", session_id)
    assert compacted.returncode == 0, compacted.stderr
    after_compaction = len(model_api.requests)
    continued = claude.run("Carry on after the compaction", "--continue")
    assert (continued.returncode, continued.session_id) == (0, session_id), continued.stderr
    other = claude.run("Start on the credit notes")
    assert (other.returncode, other.session_id != session_id) == (0, True), other.stderr
    cleared = claude.run("/clear", "--resume", other.session_id)
    assert cleared.returncode == 0, cleared.stderr
    after_clear = claude.run("Begin again", "--continue")
    assert after_clear.returncode == 0, after_clear.stderr

    counts = [_blocks(request["body"]) for request in model_api.requests]
    assert max(counts) <= 1, counts
    turn = next(r for r in model_api.requests[after_compaction:] if r["kind"] == "turn")
    assert _blocks(turn["body"]) == 1, counts


def test_a_new_session_recovers_the_substantive_session_not_a_later_ping(claude, model_api):
    """A session of several prompts and edits, then a one-prompt ``ping`` session: the next
    new session is handed the substantive one, and the context names it."""
    vat = claude.project / "vat.py"
    steps = ["RATE = 20\n", "RATE = 20\nROUND = 2\n", "RATE = 20\nROUND = 2\nPER_LINE = True\n"]
    work = ""
    for number, content in enumerate(steps):
        model_api.script.append([text("Editing."), tool_use("Write", {
            "file_path": str(vat), "content": content,
        })])  # fmt: skip
        model_api.script.append([text(f"Step {number} done.")])
        args = ("--resume", work) if work else ()
        run = claude.run(f"VAT step {number}: round per invoice line", *args)
        assert run.returncode == 0, run.stderr
        work = run.session_id
    ping = claude.run("ping")
    assert ping.returncode == 0, ping.stderr
    assert ping.session_id != work
    before = len(model_api.requests)

    fresh = claude.run("What was I doing?")

    assert fresh.returncode == 0, fresh.stderr
    assert fresh.session_id not in (work, ping.session_id)
    first = ModelAPI.request_text(model_api.requests[before]["body"])
    assert first.count(HEADER) == 1
    block = first[first.index(HEADER) :]
    assert f"earlier session in this project (`{work}`)" in block
    assert ping.session_id not in block
    assert "VAT step 2: round per invoice line" in block
    assert Session.objects.get(session_key=work).prompt_count == 3


def _turn_after(model_api: ModelAPI, start: int, prompt: str) -> dict[str, Any] | None:
    """The first conversation request from index ``start`` on whose text carries ``prompt``."""
    for request in model_api.requests[start:]:
        if request["kind"] == "turn" and prompt in ModelAPI.request_text(request["body"]):
            return request
    return None


def _last_compact(model_api: ModelAPI, start: int) -> int | None:
    """The index of the last compaction summary request from index ``start`` on (the TUI's
    carries the tools, so it is told apart by what it asks, not by its kind)."""
    found = None
    for index, request in enumerate(model_api.requests[start:], start):
        last = (request["body"].get("messages") or [{}])[-1]
        if COMPACT_MARK in ModelAPI.request_text({"messages": [last]}).lower():
            found = index
    return found


def _after(model_api: ModelAPI, start: int) -> int:
    """The index just past the compaction's summary request (made at or after ``start``)."""
    index = _last_compact(model_api, start)
    assert index is not None
    return index + 1


def _seen(what: str, model_api: ModelAPI, tui: Tui) -> str:
    kinds = [request["kind"] for request in model_api.requests]
    return f"{what} within the wait; requests so far: {kinds}\n{tui.screen()}"


def test_in_the_tui_a_compaction_after_a_startup_recovery_holds_one_block(
    claude, model_api, tmp_path
):
    """The TUI: a new session handed the project's recovery at startup, three turns, /compact:
    at most one block in every request, and the compaction's own (this session's) after it.
    (Unlike a headless resume's, the startup context is not kept across the compaction.)"""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    model_api.script.append([text("Writing."), tool_use("Write", {
        "file_path": str(claude.project / "vat.py"), "content": "RATE = 20\n",
    })])  # fmt: skip
    model_api.script.append([text("Wrote it.")])
    earlier = claude.run("Add a VAT rate constant")
    assert claude.run("Round per line", "--resume", earlier.session_id).returncode == 0
    started = len(model_api.requests)
    tui = Tui(claude, f"signet-{tmp_path.name}")
    try:
        tui.start()
        for prompt in ("Carry on", "Now the PDF", "And the totals"):
            sent = len(model_api.requests)
            tui.send(prompt)
            # The turn's own request, not just any (a title or a hook's may come first).
            assert wait_until(lambda p=prompt, s=sent: _turn_after(model_api, s, p)), _seen(
                f"no conversation request carrying {prompt!r}", model_api, tui
            )
            assert wait_until(lambda: "esc to interrupt" not in tui.screen()), tui.screen()
        before = len(model_api.requests)
        tui.send("/compact")
        assert wait_until(lambda: "Compacted" in tui.screen(), timeout=90), tui.screen()
        assert wait_until(lambda: _last_compact(model_api, before) is not None), _seen(
            "no compaction summary request", model_api, tui
        )
        tui.send("After the compaction")
        # Stop only once the prompt's own request, made after the summary's, has arrived.
        assert wait_until(
            lambda: _turn_after(model_api, _after(model_api, before), "After the compaction")
        ), _seen("no conversation request after the compaction", model_api, tui)
        after_compaction = _after(model_api, before)
    finally:
        tui.stop()

    counts = [_blocks(request["body"]) for request in model_api.requests[started:]]
    assert max(counts) <= 1, counts
    turn = next(r for r in model_api.requests[after_compaction:] if r["kind"] == "turn")
    first = ModelAPI.request_text(turn["body"])
    assert first.count(HEADER) == 1
    assert "pre-compaction checkpoint of this session" in first
