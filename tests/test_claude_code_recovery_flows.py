"""The real Claude Code CLI (``tests/claude_cli.py``) against the real service: a big edit's
hook body, the recovery context across headless resumes, compactions and clears, and which
session a new one recovers from (issue #29, findings 6-8)."""

from __future__ import annotations

import pytest

from checkpoints.models import Session
from tests.model_api import text, tool_use

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
