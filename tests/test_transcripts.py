"""The Claude Code transcript reader: facts from the fixtures, bounds, and bad input."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from hooks.transcripts.claude_code import (
    DEFAULT_MAX_BYTES,
    TodoItem,
    TranscriptFacts,
    parse_lines,
    read_transcript,
)

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
TRANSCRIPT = FIXTURES / "transcript.jsonl"
LEGACY = FIXTURES / "transcript_legacy_summary.jsonl"
SUBAGENT = FIXTURES / "subagents" / "agent-a4f19c2.jsonl"

WEBAPP = "/home/alice/projects/webapp"
BRANCH = "feat/login-rate-limit"
MODEL = "claude-sonnet-4-6"


# Line builders in the real on-disk shape (protocols.md §2), written compact like Claude Code.


def dump(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def user(content: str | list[dict[str, Any]], **extra: Any) -> str:
    return dump(
        {
            "parentUuid": None,
            "isSidechain": False,
            "userType": "external",
            "cwd": WEBAPP,
            "sessionId": "s-1",
            "version": "2.1.230",
            "gitBranch": BRANCH,
            "type": "user",
            "message": {"role": "user", "content": content},
            "uuid": "u-1",
            "timestamp": "2026-08-18T09:12:03.562Z",
            **extra,
        }
    )


def usage(input_tokens: int, cache_read: int, cache_creation: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": cache_creation},
        "output_tokens": 50,
        "service_tier": "standard",
    }


def assistant(
    blocks: list[dict[str, Any]],
    *,
    msg_id: str = "msg_1",
    request_id: str = "req_1",
    tokens: tuple[int, int, int] = (1, 1000, 10),
    model: str = MODEL,
    **extra: Any,
) -> str:
    return dump(
        {
            "parentUuid": "u-1",
            "isSidechain": False,
            "userType": "external",
            "cwd": WEBAPP,
            "sessionId": "s-1",
            "version": "2.1.230",
            "gitBranch": BRANCH,
            "type": "assistant",
            "message": {
                "model": model,
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "content": blocks,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage(*tokens),
            },
            "requestId": request_id,
            "uuid": "a-1",
            "timestamp": "2026-08-18T09:12:05.562Z",
            **extra,
        }
    )


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}


def todo_write(*todos: tuple[str, str, str]) -> dict[str, Any]:
    items = [{"content": c, "status": s, "activeForm": a} for c, s, a in todos]
    return tool_use("TodoWrite", {"todos": items})


def tool_result(content: str) -> list[dict[str, Any]]:
    return [{"tool_use_id": "toolu_1", "type": "tool_result", "content": content}]


def boundary() -> str:
    return dump(
        {
            "parentUuid": None,
            "logicalParentUuid": "u-1",
            "isSidechain": False,
            "gitBranch": BRANCH,
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "isMeta": False,
            "compactMetadata": {"trigger": "auto", "preTokens": 160000},
        }
    )


def fixture_facts() -> TranscriptFacts:
    facts = read_transcript(TRANSCRIPT)
    assert facts is not None
    return facts


# The fixtures.


def test_the_fixture_transcript_yields_its_facts():
    facts = fixture_facts()

    assert facts.current_task == "Continue: finish the Redis conversion and run the tests."
    assert facts.todos == ()
    assert facts.last_user_request == "Continue: finish the Redis conversion and run the tests."
    # The compact summary (isCompactSummary) and tool results are not prompts.
    assert facts.recent_prompts == (
        "Add rate limiting to POST /api/login: max 5 attempts per IP per 15 minutes, "
        "return 429 with Retry-After.",
        "Move the counter store to Redis using the existing client in src/lib/redis.ts.",
        "Continue: finish the Redis conversion and run the tests.",
    )
    # Write then Edit rateLimit.ts, Edit auth.ts, Edit rateLimit.ts twice more: the last
    # touch orders them; Read calls do not count.
    assert facts.modified_files == (
        f"{WEBAPP}/src/routes/auth.ts",
        f"{WEBAPP}/src/middleware/rateLimit.ts",
    )
    assert facts.last_assistant_message == (
        "Done. The limiter now uses Redis (`INCR` + `PEXPIRE` on the first hit), so counts "
        "survive restarts and are shared across instances. All 14 auth tests pass."
    )
    assert facts.git_branch == BRANCH
    assert facts.model == MODEL
    # Last response after the boundary (msg_01XaFgTisNRi1AFS4FKboCbBVV):
    # input 1 + cache_read 21313 + cache_creation 311.
    assert facts.context_tokens == 21625
    assert facts.compactions == 1
    assert facts.truncated is False


def test_the_fixture_transcript_yields_its_goal_and_compaction_summary():
    facts = fixture_facts()

    assert facts.goal == (
        "Add rate limiting to POST /api/login: max 5 attempts per IP per 15 minutes, "
        "return 429 with Retry-After."
    )
    # Without Claude Code's preamble, as PostCompact's compact_summary.
    assert facts.compact_summary.startswith("Summary:\n1. Primary Request and Intent:\n")
    assert facts.compact_summary.endswith("   - Re-run npm test -- auth.")
    payload = facts.as_payload()
    assert payload["goal"] == facts.goal
    assert payload["compact_summary"] == facts.compact_summary


def test_a_subagent_file_is_all_sidechain_and_yields_only_the_branch():
    facts = read_transcript(SUBAGENT)

    assert facts == TranscriptFacts(
        current_task="",
        todos=(),
        last_user_request="",
        recent_prompts=(),
        modified_files=(),
        last_assistant_message="",
        git_branch=BRANCH,
        model="",
        context_tokens=None,
        compactions=0,
        truncated=False,
    )


def test_a_legacy_summary_only_file_yields_empty_facts():
    facts = read_transcript(LEGACY)

    assert facts is not None
    assert facts.current_task == ""
    assert facts.recent_prompts == ()
    assert facts.context_tokens is None
    assert facts.compactions == 0


def test_legacy_summary_lines_before_a_conversation_are_skipped(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_bytes(LEGACY.read_bytes() + TRANSCRIPT.read_bytes())

    assert read_transcript(path) == fixture_facts()


# Tasks and prompts.


def test_the_in_progress_todo_of_the_latest_todowrite_is_the_current_task():
    lines = [
        user("Add rate limiting to the login endpoint."),
        assistant(
            [
                todo_write(
                    ("Write the middleware", "in_progress", "Writing the middleware"),
                    ("Run the tests", "pending", "Running the tests"),
                )
            ]
        ),
        user(tool_result("Todos have been modified successfully.")),
        assistant(
            [
                todo_write(
                    ("Write the middleware", "completed", "Writing the middleware"),
                    ("Mount it on POST /api/login", "in_progress", "Mounting it"),
                    ("Run the tests", "pending", "Running the tests"),
                )
            ],
            msg_id="msg_2",
            request_id="req_2",
        ),
    ]

    facts = parse_lines(lines)

    assert facts.current_task == "Mount it on POST /api/login"
    assert facts.todos == (
        TodoItem("Write the middleware", "completed", "Writing the middleware"),
        TodoItem("Mount it on POST /api/login", "in_progress", "Mounting it"),
        TodoItem("Run the tests", "pending", "Running the tests"),
    )
    assert facts.last_user_request == "Add rate limiting to the login endpoint."


def test_several_in_progress_todos_are_joined():
    lines = [assistant([todo_write(("Fix A", "in_progress", ""), ("Fix B", "in_progress", ""))])]

    assert parse_lines(lines).current_task == "Fix A; Fix B"


def test_without_an_in_progress_todo_the_last_request_is_the_current_task():
    lines = [
        user("Tidy the README."),
        assistant([todo_write(("Tidy the README", "completed", "Tidying"))]),
    ]

    facts = parse_lines(lines)

    assert facts.current_task == "Tidy the README."
    assert facts.todos == (TodoItem("Tidy the README", "completed", "Tidying"),)


def test_harness_artifacts_are_not_user_requests():
    lines = [
        user("Make the login form accessible."),
        user("<command-name>/compact</command-name>\n<command-args>x</command-args>"),
        user("<local-command-stdout>Saved.</local-command-stdout>"),
        user("<command-message>remember is running…</command-message>"),
        user("<system-reminder>The user opened a file.</system-reminder>"),
        user("Caveat: The messages below were generated by the user while running local commands."),
        user([text("[Request interrupted by user for tool use]")]),
        user("Expanded prompt text", isMeta=True),
        user(tool_result("ok")),
        user("   "),
        user(
            "This session is being continued from a previous conversation that ran out of context."
        ),
    ]

    facts = parse_lines(lines)

    assert facts.recent_prompts == ("Make the login form accessible.",)
    assert facts.last_user_request == "Make the login form accessible."


def test_text_blocks_of_a_user_message_are_a_prompt():
    image = {"type": "image", "source": {"type": "base64", "data": "AAAA"}}
    lines = [user([text("What is wrong"), image, text("in this screenshot?")])]

    assert parse_lines(lines).recent_prompts == ("What is wrong\nin this screenshot?",)


def test_recent_prompts_keep_the_last_ten_each_trimmed_to_500_chars():
    lines = [user(f"prompt {n}") for n in range(15)] + [user("x" * 3000)]

    facts = parse_lines(lines)

    assert len(facts.recent_prompts) == 10
    assert facts.recent_prompts[0] == "prompt 6"
    assert len(facts.recent_prompts[-1]) == 500
    assert facts.recent_prompts[-1].endswith("…")
    assert len(facts.last_user_request) == 2000


# Files.


def test_modified_files_cover_every_edit_tool_in_order_of_last_touch():
    lines = [
        assistant([tool_use("Write", {"file_path": "/p/a.py", "content": ""})]),
        assistant([tool_use("MultiEdit", {"file_path": "/p/b.py", "edits": []})]),
        assistant([tool_use("NotebookEdit", {"notebook_path": "/p/c.ipynb", "new_source": ""})]),
        assistant([tool_use("Read", {"file_path": "/p/d.py"})]),
        assistant([tool_use("Edit", {"file_path": "/p/a.py", "old_string": "", "new_string": ""})]),
    ]

    assert parse_lines(lines).modified_files == ("/p/b.py", "/p/c.ipynb", "/p/a.py")


def test_modified_files_keep_the_last_fifty():
    lines = [assistant([tool_use("Write", {"file_path": f"/p/{n}.py"})]) for n in range(60)]

    files = parse_lines(lines).modified_files

    assert len(files) == 50
    assert files[0] == "/p/10.py"
    assert files[-1] == "/p/59.py"


# Context tokens.


def test_one_response_split_over_lines_counts_once():
    same = {"msg_id": "msg_A", "request_id": "req_A", "tokens": (3, 20000, 500)}
    lines = [
        assistant([{"type": "thinking", "thinking": "…", "signature": "s"}], **same),
        assistant([text("Looking.")], **same),
        assistant([tool_use("Read", {"file_path": "/p/a.py"})], **same),
    ]

    assert parse_lines(lines).context_tokens == 20503


def test_a_replayed_older_response_does_not_replace_the_latest():
    lines = [
        assistant([text("first")], msg_id="msg_A", request_id="req_A", tokens=(1, 1000, 0)),
        assistant([text("second")], msg_id="msg_B", request_id="req_B", tokens=(1, 5000, 0)),
        assistant([text("first")], msg_id="msg_A", request_id="req_A", tokens=(1, 1000, 0)),
    ]

    assert parse_lines(lines).context_tokens == 5001


def test_a_compact_boundary_resets_context_tokens():
    before = assistant([text("Working.")], tokens=(1, 150000, 9000))
    after = assistant([text("Resumed.")], msg_id="msg_2", request_id="req_2", tokens=(3, 0, 6000))

    only_boundary = parse_lines([before, boundary()])
    with_usage_after = parse_lines([before, boundary(), user("Go on."), after])

    assert only_boundary.context_tokens is None
    assert only_boundary.compactions == 1
    assert only_boundary.last_assistant_message == "Working."
    assert with_usage_after.context_tokens == 6003
    assert with_usage_after.compactions == 1


def test_synthetic_error_lines_do_not_count_as_the_agent():
    lines = [
        assistant([text("Real answer.")], tokens=(1, 9000, 0)),
        assistant(
            [text("No response requested.")],
            msg_id="msg_syn",
            request_id="req_syn",
            model="<synthetic>",
            tokens=(0, 0, 0),
        ),
    ]

    facts = parse_lines(lines)

    assert facts.model == MODEL
    assert facts.context_tokens == 9001
    assert facts.last_assistant_message == "Real answer."


def test_sidechain_lines_are_ignored():
    side = {"isSidechain": True, "agentId": "a4f19c2"}
    lines = [
        user("Main request."),
        assistant([text("Main answer.")], tokens=(1, 4000, 0)),
        user("Subagent prompt.", **side),
        assistant(
            [text("Subagent answer."), tool_use("Edit", {"file_path": "/p/side.py"})],
            msg_id="msg_side",
            request_id="req_side",
            model="claude-haiku-4-5-20251001",
            tokens=(5, 0, 3120),
            **side,
        ),
        assistant([todo_write(("Subagent step", "in_progress", ""))], **side),
    ]

    facts = parse_lines(lines)

    assert facts.recent_prompts == ("Main request.",)
    assert facts.current_task == "Main request."
    assert facts.last_assistant_message == "Main answer."
    assert facts.model == MODEL
    assert facts.context_tokens == 4001
    assert facts.modified_files == ()
    assert facts.todos == ()


def test_tool_result_lines_skipped_unparsed_still_give_the_branch(tmp_path):
    path = tmp_path / "branch.jsonl"
    result = user(
        tool_result("Switched to a new branch 'fix/retry-after'"),
        gitBranch="fix/retry-after",
        toolUseResult={"stdout": "Switched to a new branch", "stderr": ""},
    )
    path.write_text(f"{user('Start a branch.')}\n{result}\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.git_branch == "fix/retry-after"
    assert facts.recent_prompts == ("Start a branch.",)


def test_an_assistant_line_that_mentions_tool_results_is_still_read(tmp_path):
    path = tmp_path / "meta.jsonl"
    line = assistant(
        [text('Each result line has a "toolUseResult": field.')],
        toolUseResult={"odd": True},
    )
    path.write_text(line + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.last_assistant_message == 'Each result line has a "toolUseResult": field.'
    assert facts.context_tokens == 1011


# I/O and bad content.


def test_a_missing_file_gives_none(tmp_path):
    assert read_transcript(tmp_path / "nope.jsonl") is None


def test_a_directory_gives_none(tmp_path):
    assert read_transcript(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_a_fifo_gives_none_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)

    assert read_transcript(fifo) is None


def test_an_empty_file_gives_empty_facts(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.current_task == ""
    assert facts.context_tokens is None


def test_max_bytes_must_be_positive():
    with pytest.raises(ValueError, match="max_bytes"):
        read_transcript(TRANSCRIPT, max_bytes=0)


JUNK = [
    b"not json at all",
    b"{broken",
    b"[1, 2, 3]",
    b'"a string"',
    b"42",
    b"null",
    b"\x00\xff\xfe\x80garbage\x9c",
    b'{"type": "user", "message": "not an object"}',
    b'{"type": "user", "message": {"content": 5}}',
    b'{"type": "user", "isSidechain": "yes", "message": {"content": "wrong type flag"}}',
    b'{"type": "assistant", "message": {"model": 7, "content": {"x": 1}, "usage": []}}',
    b'{"type": "assistant", "message": {"content": [1, null, {"type": "tool_use"}]}}',
    b'{"type": "assistant", "message": {"usage": {"input_tokens": "12"}}}',
    b'{"type": "assistant", "message": {"usage": {"input_tokens": true}}}',
    b'{"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Edit", '
    b'"input": {"file_path": ["x"]}}]}}',
    b'{"type": "assistant", "message": {"content": [{"type": "tool_use", '
    b'"name": "TodoWrite", "input": {"todos": "nope"}}]}}',
    b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",  # deeper than the recursion limit
    b"{}",
    b"",
    b"   ",
]


def test_garbage_between_lines_changes_nothing(tmp_path):
    path = tmp_path / "junk.jsonl"
    lines = TRANSCRIPT.read_bytes().splitlines()
    mixed = [piece for line in lines for piece in (line, *JUNK)]
    path.write_bytes(b"\n".join(JUNK + mixed))

    assert read_transcript(path) == fixture_facts()


def test_a_half_written_last_line_is_skipped(tmp_path):
    path = tmp_path / "partial.jsonl"
    data = TRANSCRIPT.read_bytes().rstrip(b"\n")
    last_start = data.rfind(b"\n", 0, data.rfind(b"\n")) + 1
    # Cut inside the final assistant answer (the line before the turn_duration line).
    path.write_bytes(data[: last_start + 200])

    facts = read_transcript(path)

    assert facts is not None
    assert facts.last_assistant_message == "Making the middleware async now."
    assert facts.context_tokens == 21087 + 226 + 1  # msg_01BximNigReGt4sdthk58biVvP
    assert facts.last_user_request == "Continue: finish the Redis conversion and run the tests."


def test_parse_lines_takes_str_and_bytes():
    lines = [user("From a str."), user("From bytes.").encode(), "\n"]

    assert parse_lines(lines).recent_prompts == ("From a str.", "From bytes.")


# The tail read.


def test_a_big_file_is_read_only_at_its_tail(tmp_path):
    path = tmp_path / "big.jsonl"
    filler = assistant([text("x" * 4000)], msg_id="msg_fill", request_id="req_fill")
    with path.open("w") as handle:
        handle.write(user("Early request.") + "\n")
        handle.write(assistant([tool_use("Edit", {"file_path": "/p/early.py"})]) + "\n")
        handle.write(boundary() + "\n")
        for _ in range(5 * 1024 * 1024 // len(filler)):
            handle.write(filler + "\n")
        handle.write(user("Late request.") + "\n")
        handle.write(
            assistant(
                [text("Late answer."), tool_use("Write", {"file_path": "/p/late.py"})],
                msg_id="msg_late",
                request_id="req_late",
                tokens=(2, 30000, 100),
            )
            + "\n"
        )
    assert path.stat().st_size > 5 * 1024 * 1024

    facts = read_transcript(path, max_bytes=64 * 1024)

    assert facts is not None
    assert facts.truncated is True
    assert facts.recent_prompts == ("Late request.",)
    assert facts.modified_files == ("/p/late.py",)
    assert facts.last_assistant_message == "Late answer."
    assert facts.context_tokens == 30102
    assert facts.compactions == 0  # the boundary is outside the tail
    assert read_transcript(path, max_bytes=DEFAULT_MAX_BYTES).truncated is True


def test_a_cut_on_a_line_start_keeps_that_line(tmp_path):
    path = tmp_path / "two.jsonl"
    first, second = user("First."), user("Second.")
    path.write_text(f"{first}\n{second}\n")

    exact = read_transcript(path, max_bytes=len(second) + 1)
    one_short = read_transcript(path, max_bytes=len(second))

    assert exact is not None
    assert exact.truncated is True
    assert exact.recent_prompts == ("Second.",)
    assert one_short is not None
    assert one_short.recent_prompts == ()


def test_a_file_that_fits_is_not_truncated(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_bytes(TRANSCRIPT.read_bytes())

    facts = read_transcript(path, max_bytes=path.stat().st_size)

    assert facts == fixture_facts()


def test_a_skipped_line_gives_the_first_branch_name_without_quote_or_backslash(tmp_path):
    # A name with an escaped quote cannot be read without parsing: the next one counts.
    # (A JSON parse would give the last of the three.)
    line = (
        b'{"type":"user","toolUseResult":{},"gitBranch":"a\\"b",'
        b'"message":{"content":[{"type":"tool_result"}]},"gitBranch":"fix/next",'
        b'"gitBranch":"last"}'
    )
    path = tmp_path / "branch.jsonl"
    path.write_bytes(line + b"\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.git_branch == "fix/next"


def test_lines_are_parsed_with_the_decoder_given(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(f"{user('Only this one.')}\n")
    seen: list[bytes] = []

    def loads(line: bytes) -> Any:
        seen.append(line)
        return json.loads(line)

    facts = read_transcript(path, loads=loads)

    assert facts is not None
    assert facts.recent_prompts == ("Only this one.",)
    assert len(seen) == 1


def test_facts_are_values_read_only_once_made():
    item = TodoItem("Write it", "pending")

    assert item == TodoItem("Write it", "pending", "")
    assert item != TodoItem("Write it", "completed")
    assert hash(item) == hash(TodoItem("Write it", "pending"))
    assert "content='Write it'" in repr(item)
    with pytest.raises(AttributeError):
        item.status = "completed"
    assert copy.deepcopy(item) == item
    assert pickle.loads(pickle.dumps(item)) == item  # noqa: S301 (our own bytes)


# What a person typed (issue #30): lines as Claude Code 2.0/2.1 writes them.

TASK_EXIT = (
    "<task-notification>\n<task-id>b8k2j1x</task-id>\n<tool-use-id>toolu_01Vd9</tool-use-id>\n"
    "<output-file>/tmp/claude-1000/-home-alice-projects-webapp/tasks/b8k2j1x.output</output-file>\n"
    "<status>failed</status>\n"
    '<summary>Background command "npm run dev" failed with exit code 143</summary>\n'
    "</task-notification>\n"
    "Read the output file to retrieve the result: "
    "/tmp/claude-1000/-home-alice-projects-webapp/tasks/b8k2j1x.output"
)
IDE_FILE = (
    f"<ide_opened_file>The user opened the file {WEBAPP}/src/routes/auth.ts in the IDE. "
    "This may or may not be related to the current task.</ide_opened_file>"
)


def slash(name: str, args: str = "") -> str:
    return (
        f"<command-message>{name}</command-message>\n<command-name>/{name}</command-name>\n"
        f"<command-args>{args}</command-args>"
    )


def test_harness_notices_are_not_prompts_and_typed_text_beside_one_is():
    lines = [
        user("Fix the flaky login test."),
        user(TASK_EXIT, origin={"kind": "task-notification"}),
        # The VS Code extension sends the IDE notice as a text block of its own.
        user([text(IDE_FILE), text("why does it time out after 5 s?")]),
        user(f"{IDE_FILE}\nand the retry test?"),
        user([text("run them again"), text("<system-reminder>Be brief.</system-reminder>")]),
        user("\x1b[1;31mERROR\x1b[0m pool exhausted\n[1;33mWARN[0m retrying: what is this?"),
        user("<local-command-stdout>Set model to claude-opus-4-1[1m]</local-command-stdout>"),
        user(TASK_EXIT),
    ]

    facts = parse_lines(lines)

    assert facts.recent_prompts == (
        "Fix the flaky login test.",
        "why does it time out after 5 s?",
        "and the retry test?",
        "run them again",
        "ERROR pool exhausted\nWARN retrying: what is this?",
    )
    assert facts.last_user_request == "ERROR pool exhausted\nWARN retrying: what is this?"
    assert facts.current_task == facts.last_user_request


def test_slash_commands_are_prompts_as_typed_and_local_ones_are_not():
    lines = [
        user(slash("opsx:apply", "add-login-rate-limit")),
        user("Base directory for this skill: /home/alice/.claude/skills/opsx", isMeta=True),
        user(slash("model", "opus")),
        user("<local-command-stdout>Set model to opus</local-command-stdout>"),
        user(slash("clear")),
        user(slash("review")),
    ]

    facts = parse_lines(lines)

    assert facts.recent_prompts == ("/opsx:apply add-login-rate-limit", "/review")
    assert facts.goal == "/opsx:apply add-login-rate-limit"


def test_recent_prompts_are_the_last_ten_a_person_typed():
    lines = []
    for n in range(12):
        lines += [user(f"Step {n}: tighten the limiter"), user(TASK_EXIT), user(IDE_FILE)]

    facts = parse_lines(lines)

    assert facts.recent_prompts == tuple(f"Step {n}: tighten the limiter" for n in range(2, 12))


def edit(name: str, path: str, tool_id: str) -> dict[str, Any]:
    field = "notebook_path" if name == "NotebookEdit" else "file_path"
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {field: path}}


def result(tool_id: str, content: str, **extra: Any) -> str:
    block: dict[str, Any] = {"type": "tool_result", "content": content}
    if "is_error" in extra:
        block["is_error"] = extra.pop("is_error")
    block["tool_use_id"] = tool_id
    return user([block], **extra)


EDIT_OK = {"toolUseResult": {"filePath": "/p/x.py", "oldString": "a", "newString": "b"}}
NOT_FOUND = (
    "<tool_use_error>String to replace not found in file.\nString: retryAfter</tool_use_error>"
)
REJECTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). STOP what you are doing and "
    "wait for the user to tell you how to proceed."
)


def test_a_failed_or_rejected_edit_is_not_a_modified_file(tmp_path):
    lines = [
        assistant([edit("Edit", "/p/a.py", "toolu_A1")]),
        result("toolu_A1", "The file /p/a.py has been updated.", **EDIT_OK),
        assistant([edit("Write", "/p/c.py", "toolu_C1")]),
        result("toolu_C1", "File created successfully at: /p/c.py", **EDIT_OK),
        assistant([edit("Edit", "/p/a.py", "toolu_A2")]),  # a's last touch fails: a stays first
        result("toolu_A2", NOT_FOUND, is_error=True, toolUseResult=f"Error: {NOT_FOUND}"),
        assistant([edit("Write", "/p/new.py", "toolu_N")]),
        result("toolu_N", REJECTED, is_error=True, toolUseResult="User rejected tool use"),
        assistant([edit("MultiEdit", "/p/m.py", "toolu_M")]),
        result(
            "toolu_M",
            "<tool_use_error>File has not been read yet. Read it first before writing to it."
            "</tool_use_error>",
            is_error=True,
            toolUseResult="Error: File has not been read yet.",
        ),
        assistant([edit("NotebookEdit", "/p/n.ipynb", "toolu_B")]),
        result("toolu_B", "Updated cell 2", **EDIT_OK),
        assistant([edit("Edit", "/p/late.py", "toolu_L")]),  # no result yet: counts
    ]
    path = tmp_path / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.modified_files == ("/p/a.py", "/p/c.py", "/p/n.ipynb", "/p/late.py")
    assert parse_lines(lines).modified_files == facts.modified_files


def test_a_failed_result_of_another_tool_leaves_the_edit(tmp_path):
    lines = [
        assistant([edit("Edit", "/p/a.py", "toolu_A"), tool_use("Bash", {"command": "false"})]),
        result("toolu_1", "Exit code 1", is_error=True, toolUseResult="Error: Exit code 1"),
        result("toolu_A", "The file /p/a.py has been updated.", **EDIT_OK),
    ]
    path = tmp_path / "other.jsonl"
    path.write_text("\n".join(lines) + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.modified_files == ("/p/a.py",)


def test_the_goal_is_the_first_substantive_request_read_from_the_start(tmp_path):
    lines = [
        user("hi"),
        assistant([text("Hi! What can I do for you?")]),
        user(IDE_FILE),
        user("Make the login limiter per account, not per IP."),
        user("ok go on"),
        user("Also log each refusal."),
    ]
    path = tmp_path / "goal.jsonl"
    path.write_text("\n".join(lines) + "\n")

    whole = read_transcript(path)
    tail = read_transcript(path, max_bytes=len(lines[-1]) * 3)

    assert whole is not None
    assert whole.goal == "Make the login limiter per account, not per IP."
    assert tail is not None
    assert tail.truncated is True
    assert tail.goal == ""  # the opening request is not in the tail


def test_the_latest_compaction_summary_is_kept_flagged_or_not():
    first = (
        "This session is being continued from a previous conversation that ran out of context. "
        "The summary below covers the earlier portion of the conversation.\n\nSummary:\n"
        "1. Primary Request and Intent:\n   Rate-limit login.\n"
    )
    second = (
        "This session is being continued from a previous conversation that ran out of context. "
        "The summary below covers the earlier portion of the conversation.\n\nSummary:\n"
        "1. Primary Request and Intent:\n   Rate-limit login per account.\n\n"
        "7. Pending Tasks:\n   - Log refusals.\n\n8. Current Work:\n   The Redis store.\n\n"
        "9. Optional Next Step:\n   Run npm test.\n\n"
        "If you need specific details from before compaction (like exact code snippets, error "
        "messages, or content you generated), read the full transcript at: "
        "/home/alice/.claude/projects/-home-alice-projects-webapp/s-1.jsonl"
    )
    flags = {"isVisibleInTranscriptOnly": True, "isCompactSummary": True}
    lines = [boundary(), user(first, **flags), user("Go on."), boundary(), user([text(second)])]

    facts = parse_lines(lines)

    assert facts.compact_summary == (
        "Summary:\n1. Primary Request and Intent:\n   Rate-limit login per account.\n\n"
        "7. Pending Tasks:\n   - Log refusals.\n\n8. Current Work:\n   The Redis store.\n\n"
        "9. Optional Next Step:\n   Run npm test."
    )
    assert facts.recent_prompts == ("Go on.",)
    assert len(parse_lines([user("x" * 30_000, **flags)]).compact_summary) == 20_000


def test_a_long_last_message_keeps_its_start_and_its_closing_paragraph():
    body = "\n\n".join(f"Paragraph {n}: " + "details of the change. " * 20 for n in range(10))
    closing = "Shall I also move the counters to Redis, or keep them in memory for now?"
    message = f"I changed the limiter.\n\n{body}\n\n{closing}"

    facts = parse_lines([assistant([text(message)])])

    kept = facts.last_assistant_message
    assert len(message) > 2000 >= len(kept)
    assert kept.startswith("I changed the limiter.\n\nParagraph 0: details")
    assert kept.endswith(f" … {closing}")


def test_a_long_message_of_one_paragraph_keeps_its_start_and_end():
    message = "Start. " + "word " * 1000 + "Run npm test next?"

    kept = parse_lines([assistant([text(message)])]).last_assistant_message

    assert len(kept) <= 2000
    assert kept.startswith("Start. word")
    assert kept.endswith("word Run npm test next?")
    assert " … " in kept


# What a person says that is not a user line of its own (issue 30).


def queued(operation: str, content: str | None = None) -> str:
    record: dict[str, Any] = {
        "type": "queue-operation",
        "operation": operation,
        "timestamp": "2026-08-18T09:13:00.000Z",
        "sessionId": "s-1",
    }
    if content is not None:
        record["content"] = content
    return dump(record)


def test_a_message_typed_while_the_agent_was_busy_is_a_prompt_once(tmp_path):
    lines = [
        user("Start the dev server and the tunnel, then open a PR for phase 12."),
        assistant([tool_use("Bash", {"command": "pnpm dev"})]),
        # Handed to the agent mid-turn: no user line follows.
        queued("enqueue", "you dont have access to docker here"),
        queued("enqueue", '{"task_id":"b8ced12","description":"Push","task_type":"local_bash"}'),
        queued("remove"),
        queued("remove"),
        result("toolu_1", "Waiting... (1)"),
        assistant([text("Right, no Docker needed.")]),
        # Queued, then the next turn starts with it: its user line follows.
        queued("enqueue", "yeah"),
        queued("dequeue"),
        user("yeah"),
        # Queued, then taken back into the input box and never sent.
        queued("enqueue", "huh"),
        queued("popAll", "huh"),
        queued("popAll", "huh"),
        user("why do the uploads fail?"),
        queued("enqueue", "getting 500 errors on upload and resolve calls"),
    ]
    path = tmp_path / "queued.jsonl"
    path.write_text("\n".join(lines) + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.recent_prompts == (
        "Start the dev server and the tunnel, then open a PR for phase 12.",
        "you dont have access to docker here",
        "yeah",
        "why do the uploads fail?",
        "getting 500 errors on upload and resolve calls",
    )
    assert facts.last_user_request == "getting 500 errors on upload and resolve calls"
    assert facts.current_task == facts.last_user_request


def test_queued_notices_are_no_prompts_and_a_queued_one_taken_back_is_no_goal():
    lines = [
        queued(
            "enqueue",
            "<agent-notification>\n<agent-id>ab24fcc</agent-id>\n<status>completed</status>\n"
            '<summary>Agent "Analyze conventions" completed.</summary>\n'
            "Read the output file to retrieve the full result.\n</agent-notification>",
        ),
        queued("remove"),
        queued("enqueue", "Map the codebase before we plan anything."),
        queued("popAll", "Map the codebase before we plan anything."),
        user(
            "<task-notification>\n<task-id>aef9ffc</task-id>\n<status>completed</status>\n"
            "<result>Root cause: a missing migration.</result>\n</task-notification>\n"
            "Full transcript available at: /private/tmp/tasks/aef9ffc.output"
        ),
        user("ok"),
        user("Plan the QA coordination hub."),
    ]

    facts = parse_lines(lines)

    assert facts.recent_prompts == ("ok", "Plan the QA coordination hub.")
    assert facts.goal == "Plan the QA coordination hub."


REJECTED_SAID = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
    "the user said:\n"
)


def test_what_the_user_typed_on_rejecting_a_call_is_the_latest_request(tmp_path):
    said = "do the read and webfetch tool calls follow a similar pattern?"
    lines = [
        user("Filter verbose tool content out of the summaries."),
        assistant([edit("Edit", "/p/summarise.go", "toolu_E")]),
        result("toolu_E", "The file /p/summarise.go has been updated.", **EDIT_OK),
        assistant([edit("Write", "/p/types.go", "toolu_W")]),
        result(
            "toolu_W",
            REJECTED_SAID + said,
            is_error=True,
            toolUseResult=f"Error: {REJECTED_SAID}{said}",
        ),
    ]
    path = tmp_path / "rejected.jsonl"
    path.write_text("\n".join(lines) + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.last_user_request == said
    assert facts.recent_prompts == ("Filter verbose tool content out of the summaries.", said)
    assert facts.modified_files == ("/p/summarise.go",)  # the rejected Write changed nothing


def answered(tool_id: str, answers: dict[str, str]) -> str:
    pairs = ", ".join(f'"{q}"="{a}"' for q, a in answers.items())
    return result(
        tool_id,
        f"User has answered your questions: {pairs}. You can now continue with the user's "
        "answers in mind.",
        toolUseResult={
            "questions": [
                {"question": q, "header": "Scope", "options": [], "multiSelect": False}
                for q in answers
            ],
            "answers": answers,
        },
    )


def test_the_users_answers_to_the_agents_questions_are_decisions(tmp_path):
    lines = [
        user("Plan the session-share plugin."),
        assistant([tool_use("AskUserQuestion", {"questions": []})]),
        answered(
            "toolu_1",
            {
                "What's explicitly NOT in v1?": "Playwright integration",
                "Any hard constraints I should know about?": "",
            },
        ),
        assistant([tool_use("AskUserQuestion", {"questions": []})]),
        answered(
            "toolu_1",
            {"How should users specify gist visibility?": "Default unlisted only (MVP)"},
        ),
        # The same line again (a resumed session copies it): still one decision, newest last.
        answered("toolu_1", {"What's explicitly NOT in v1?": "Playwright integration"}),
        assistant([tool_use("AskUserQuestion", {"questions": []})]),
        answered("toolu_1", {"Which names? " * 40: "Short ones, " * 30}),
    ]
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(lines) + "\n")

    facts = read_transcript(path)

    assert facts is not None
    assert facts.decisions[:2] == (
        "How should users specify gist visibility? → Default unlisted only (MVP)",
        "What's explicitly NOT in v1? → Playwright integration",
    )
    assert len(facts.decisions) == 3
    assert facts.decisions[2].startswith("Which names? Which names?")
    assert "→ Short ones, Short ones," in facts.decisions[2]
    assert len(facts.decisions[2]) <= 300
    assert facts.recent_prompts == ("Plan the session-share plugin.",)  # answers: no prompts
    assert facts.as_payload()["decisions"] == list(facts.decisions)


def test_decisions_keep_the_last_twenty():
    lines = [answered("toolu_1", {f"Question {n}?": f"Answer {n}"}) for n in range(25)]

    facts = parse_lines(line.encode() for line in lines)

    assert facts.decisions == tuple(f"Question {n}? → Answer {n}" for n in range(5, 25))


# --- A Stop that does not say what the turn's last response was (Claude Code 2.0) -----------


def test_a_stop_without_its_message_waits_for_the_turns_answer_and_reads_it(tmp_path):
    from hooks.transcripts.usage import read_answer
    from tests.test_task_list import Steps

    path = tmp_path / "t.jsonl"
    call = tool_use("Bash", {"command": "cargo test"})
    path.write_text(
        "\n".join([
            user("Why does the panel show nothing?"),
            assistant([text("Let me run the applet standalone.")], msg_id="m1"),
            assistant([call], msg_id="m1"),
            user([{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}],
                 toolUseResult={"stdout": "ok"}),
        ]) + "\n"
    )  # fmt: skip
    # The turn's answer is written while Stop runs; a subagent's words do not answer it.
    steps = Steps(path, {
        1: [assistant([text("Its words.")], msg_id="s1", isSidechain=True)],
        3: [assistant([{"type": "thinking", "thinking": "…"}], msg_id="m2")],
        4: [assistant([text("Found it: the subscription never fires.")], msg_id="m2",
                      tokens=(1, 9000, 10))],
    })  # fmt: skip

    usage, said = read_answer(path, clock=steps.clock, sleep=steps.sleep)

    assert said == "Found it: the subscription never fires."
    assert usage == {"context_tokens": 9011, "model": MODEL}
    assert steps.sleeps == 4


def test_a_stop_without_its_message_reads_no_words_from_before_a_compaction(tmp_path):
    from hooks.transcripts.usage import read_answer
    from tests.test_task_list import Steps

    path = tmp_path / "t.jsonl"
    boundary = {"type": "system", "subtype": "compact_boundary", "content": "Compacted"}
    path.write_text(assistant([text("Before it.")]) + "\n" + dump(boundary) + "\n")
    steps = Steps(path, {})

    _, said = read_answer(path, wait=0.1, clock=steps.clock, sleep=steps.sleep)

    assert said == ""


def test_a_stop_without_its_message_does_not_wait_past_a_meta_line_or_an_api_error(tmp_path):
    from hooks.transcripts.usage import read_answer
    from tests.test_task_list import Steps

    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join([
            user("Run the tests."),
            assistant([text("All 14 pass.")], msg_id="m1"),
            user("<system-reminder>The task list is empty.</system-reminder>", isMeta=True),
        ]) + "\n"
    )  # fmt: skip
    steps = Steps(path, {})

    _, said = read_answer(path, clock=steps.clock, sleep=steps.sleep)

    assert said == "All 14 pass."
    assert steps.sleeps == 0
    # A turn that an API error ended: nothing more will come, and its text is not the agent's.
    failed = assistant([text("API Error: 529 Overloaded")], msg_id="m2", model="<synthetic>")
    path.write_text(user("And the lint?") + "\n" + failed + "\n")
    steps = Steps(path, {})
    _, said = read_answer(path, clock=steps.clock, sleep=steps.sleep)
    assert said == ""
    assert steps.sleeps == 0
