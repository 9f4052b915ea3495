"""What a compaction summary says (``services/summaries.py``)."""

from __future__ import annotations

import json

from checkpoints.services.summaries import summary_parse
from tests.hookutil import FIXTURES


def test_claude_codes_summary_gives_its_request_pending_tasks_current_work_and_next_step():
    text = """<analysis>
1. Primary Request and Intent: not this
</analysis>
Summary:
1. **Primary Request and Intent**:
   - Build a CLI for the parser
   - Keep it stdlib only

2. Key Technical Concepts:
   - argparse
7. Pending Tasks:
   1. Write the docs
   2. Add tests
      for the edge cases
8. Current Work:
   Wiring the subcommands.
9. Optional Next Step:
   Add the `export` subcommand.
"""
    parts = summary_parse(text)
    assert parts.request == "Build a CLI for the parser; Keep it stdlib only"
    assert parts.pending == ["Write the docs", "Add tests for the edge cases"]
    assert parts.current == "Wiring the subcommands."
    assert parts.next_step == "Add the `export` subcommand."
    assert parts.next_steps == [*parts.pending, "Add the `export` subcommand."]


def test_the_transcripts_own_summary_line_is_read():
    lines = (FIXTURES / "transcript.jsonl").read_text().splitlines()
    (summary,) = [
        json.loads(line)["message"]["content"]
        for line in lines
        if json.loads(line).get("isCompactSummary")
    ]
    parts = summary_parse(summary)
    assert parts.request.startswith("Rate-limit POST /api/login to 5 attempts per IP")
    assert parts.pending == [
        "Make loginRateLimit async and remove the in-memory Map.",
        "Re-run npm test -- auth.",
    ]


def test_a_summary_of_no_known_shape_or_with_nothing_pending_gives_nothing():
    assert summary_parse("The user asked for rate limiting. Next: Redis.").request == ""
    parts = summary_parse("## Pending Tasks\nNone.\n## Current Work\nThe docs")
    assert parts.pending == []
    assert parts.current == "The docs"
