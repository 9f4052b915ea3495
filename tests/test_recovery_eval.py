"""The recovery evaluation (``bench/recovery_eval.py``): a small transcript of the real shape
replayed through the installed hooks against the real service, and its result's structure
(which hooks fired, the contexts produced, the facts counted), not its scores."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from bench.claude_hooks import ServiceClock
from bench.claude_lines import prompt_of
from bench.claude_replay import HEADER
from bench.recovery_eval import COLUMNS, TAIL_CHARS, carried, evaluate, table
from bench.wsgi_service import Service, owner_token

SESSION = "5b0e2c4a-8f3d-4c1e-9a7b-2d6f1e3c9b80"
CWD = "/home/dana/projects/invoices"


class Transcript:
    """Claude Code 2.1 transcript lines: one per content block, ids, times, promptIds."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.parent: str | None = None
        self.at = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
        self.prompt_id = ""
        self.number = 0

    def _add(self, record: dict[str, Any]) -> None:
        self.at += timedelta(seconds=7)
        line_id = str(uuid.uuid4())
        self.lines.append(
            json.dumps(
                {
                    "parentUuid": self.parent,
                    "isSidechain": False,
                    "userType": "external",
                    "cwd": CWD,
                    "sessionId": SESSION,
                    "version": "2.1.197",
                    "gitBranch": "feat/vat-breakdown",
                    **record,
                    "uuid": line_id,
                    "timestamp": self.at.isoformat().replace("+00:00", "Z"),
                }
            )
        )
        self.parent = line_id

    def prompt(self, content: Any, **extra: Any) -> None:
        self.prompt_id = str(uuid.uuid4())
        message = {"role": "user", "content": content}
        self._add({"type": "user", "message": message, "promptId": self.prompt_id, **extra})

    def harness(self, text: str, **extra: Any) -> None:
        self._add({"type": "user", "message": {"role": "user", "content": text}, **extra})

    def say(self, *blocks: dict[str, Any]) -> None:
        self.number += 1
        for block in blocks:
            message = {
                "model": "claude-opus-4-8",
                "id": f"msg_{self.number:04d}",
                "type": "message",
                "role": "assistant",
                "content": [block],
                "usage": {"input_tokens": 3, "cache_read_input_tokens": 20_000 + self.number},
            }
            self._add({"type": "assistant", "message": message, "requestId": f"req_{self.number}"})

    def compaction(self, summary: str) -> None:
        """An automatic compaction: its boundary, then the summary Claude Code writes."""
        metadata = {"trigger": "auto", "preTokens": 160_000}
        self._add({"type": "system", "subtype": "compact_boundary", "compactMetadata": metadata})
        words = (
            "This session is being continued from a previous conversation that ran out of "
            "context. The summary below covers the earlier portion of the conversation.\n\n"
        )
        message = {"role": "user", "content": words + summary}
        self._add({"type": "user", "message": message, "isCompactSummary": True})

    def result(self, tool_id: str, content: str, tool_result: Any, *, error: bool = False) -> None:
        block: dict[str, Any] = {"tool_use_id": tool_id, "type": "tool_result", "content": content}
        if error:
            block["is_error"] = True
        message = {"role": "user", "content": [block]}
        self._add({"type": "user", "message": message, "toolUseResult": tool_result})


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def tool(tool_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


GOAL = "Add a VAT breakdown to the invoice totals; keep amounts in integer cents, never floats."


def session_transcript() -> list[str]:
    """Three prompts (one a slash command, one with the IDE's file block), a to-do list, a
    write, a failed edit and its retry, a background notice, a compaction and a local
    command."""
    vat = f"{CWD}/invoices/vat.py"
    pdf = f"{CWD}/invoices/pdf.py"
    t = Transcript()
    t.lines.append(json.dumps({"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}}))
    t.prompt(GOAL)
    todos = [
        {"content": "Add vat.py", "status": "in_progress", "activeForm": "Adding vat.py"},
        {"content": "Show VAT on the PDF", "status": "pending", "activeForm": "Showing VAT"},
    ]
    t.say(text("I'll plan this first."), tool("toolu_todo1", "TodoWrite", todos=todos))
    t.result("toolu_todo1", "Todos have been modified successfully", {"newTodos": todos})
    t.say(tool("toolu_write1", "Write", file_path=vat, content="RATES = {20: 2000}\n"))
    t.result(
        "toolu_write1",
        f"File created successfully at: {vat}",
        {"type": "create", "filePath": vat, "content": "RATES = {20: 2000}\n"},
    )
    t.say(text("vat.py holds the rates in cents."))
    t.harness("<task-notification>\n<status>completed</status>\n</task-notification>")
    t.compaction("Primary Request and Intent: a VAT breakdown on the invoice totals.")
    t.prompt(
        [
            text("<ide_opened_file>The user opened the file invoices/pdf.py</ide_opened_file>"),
            text("Now show the breakdown on the PDF"),
        ]
    )
    t.say(tool("toolu_edit1", "Edit", file_path=pdf, old_string="totl", new_string="total"))
    t.result(
        "toolu_edit1",
        "<tool_use_error>String to replace not found in file.</tool_use_error>",
        "Error: String to replace not found in file.",
        error=True,
    )
    t.say(tool("toolu_edit2", "Edit", file_path=pdf, old_string="total", new_string="vat_total"))
    t.result(
        "toolu_edit2",
        f"The file {pdf} has been updated.",
        {"filePath": pdf, "oldString": "total", "newString": "vat_total"},
    )
    t.say(text("The PDF shows VAT per rate. Next I will add tests for the rounding."))
    t.harness("Caveat: The messages below were generated by the user while running local commands.")
    t.harness("<command-name>/model</command-name>\n<command-message>model</command-message>")
    t.harness("<local-command-stdout>Set model to opus</local-command-stdout>")
    t.prompt(
        "<command-message>review is running…</command-message>\n"
        "<command-name>/review</command-name>\n<command-args>invoices</command-args>"
    )
    t.say(text("The review found no rounding issue; I will add the tests next."))
    return t.lines


FACTS = [
    {"kind": "goal", "fact": "VAT breakdown", "match": [["vat breakdown"], ["invoice"]]},
    {"kind": "modified_files", "fact": "vat.py and pdf.py", "match": [["vat.py"], ["pdf.py"]]},
    {"kind": "decision", "fact": "cents, never floats", "match": [["never floats"]]},
    {"kind": "branch", "fact": "the branch", "match": [["feat/vat-breakdown"]]},
]


@pytest.fixture
def service(transactional_db: Any) -> Iterator[Service]:
    running = Service().start()
    yield running
    running.stop()


@pytest.mark.slow
def test_a_small_real_shaped_session_is_replayed_and_scored(service, monkeypatch):
    lines = session_transcript()
    session = {"cut_line": len(lines), "facts": FACTS}
    tokens = (owner_token("compaction"), owner_token("dead"))
    clock = ServiceClock()
    monkeypatch.setattr(timezone, "now", clock)

    result = evaluate("small", session, lines, url=service.url, tokens=tokens, clock=clock)

    # The hooks Claude Code would have fired, in order, each delivered.
    contexts = result.contexts
    fired = [(run.event, run.matched) for run in contexts.compaction_hooks]
    walk = [
        ("SessionStart", "startup"),
        ("UserPromptSubmit", ""),
        ("PostToolUse", "Write"),  # no TodoWrite (not matched), no failed Edit
        ("Stop", ""),
        ("PreCompact", "auto"),  # the compaction the transcript holds
        ("SessionStart", "compact"),
        ("PostCompact", "auto"),
        ("UserPromptSubmit", ""),
        ("PostToolUse", "Edit"),
        ("Stop", ""),
        ("UserPromptSubmit", ""),  # /review; not the notice, the caveat nor /model
        ("Stop", ""),
    ]
    assert fired == [
        *walk,
        ("PreCompact", "auto"),
        ("SessionStart", "compact"),
        ("UserPromptSubmit", ""),
        ("SessionEnd", "prompt_input_exit"),
        ("SessionStart", "startup"),
    ]
    dead = [(run.event, run.matched) for run in contexts.dead_hooks]
    assert dead == [*walk, ("SessionStart", "startup")]
    assert result.queued() == []
    assert contexts.prompts == [GOAL, "Now show the breakdown on the PDF", "/review invoices"]

    # The service's clock followed the transcript: the cut's events came after its end.
    assert clock.at is not None
    assert clock.at > datetime.fromisoformat(json.loads(lines[-1])["timestamp"])

    # The contexts: one recovery block after the compaction, one for the next session.
    assert contexts.after_compaction.startswith(HEADER)
    assert contexts.exactly_once
    assert HEADER in result.texts["new_after"]
    assert result.texts["last_prompt"] == "/review invoices"
    assert 0 < len(result.texts["tail"]) <= TAIL_CHARS
    assert "Tool Edit" in result.texts["tail"]

    # Every fact counted in every column, and the table and JSON say so.
    for column, _ in COLUMNS:
        assert len(result.hits[column]) == len(FACTS)
        hit, total = result.count(column)
        assert total == len(FACTS)
        assert hit == sum(carried(fact, result.texts[column]) for fact in FACTS)
    assert result.count("tail", "decision") == (1, 1)  # the goal's prompt is in the tail
    report = table([result])
    assert "| small |" in report
    assert "| **total** |" in report
    assert "- exactly once on 1 of 1 compactions (goal: every one: met)" in report
    assert json.loads(json.dumps(result.as_json()))["exactly_once"] is True


def test_a_fact_needs_an_alternative_of_every_group():
    fact = {"match": [["integer cents", "cents"], ["never  floats", "no floats"]]}
    assert carried(fact, "Amounts in CENTS,\n never floats.")
    assert not carried(fact, "Amounts in cents.")
    assert not carried({"match": []}, "anything")


def test_only_what_a_person_typed_is_a_prompt():
    lines = [json.loads(line) for line in session_transcript()]
    prompts = [prompt_of(lines, index) for index in range(len(lines))]
    assert [p for p in prompts if p is not None] == [
        GOAL,
        "Now show the breakdown on the PDF",
        "/review invoices",
    ]
