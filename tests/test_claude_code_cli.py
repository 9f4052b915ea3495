"""The real Claude Code CLI (``tests/claude_cli.py``: pinned, from npm, fixture ``claude``)
with the hooks the README installs, against the real service: one headless turn."""

from __future__ import annotations

import pytest

from checkpoints.models import Injection, Session
from tests.model_api import text, tool_use

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_headless_turn_reaches_the_service_through_every_installed_hook(claude, model_api):
    model_api.script.append([
        text("Writing it."),
        tool_use("Write", {"file_path": str(claude.project / "vat.py"), "content": "RATE = 20\n"}),
    ])  # fmt: skip
    model_api.script.append([text("Wrote vat.py.")])

    run = claude.run("Add a VAT rate constant")

    assert run.returncode == 0, run.stderr
    session = Session.objects.get(session_key=run.session_id)
    assert session.prompt_count == 1
    assert session.git_branch == "feat/vat-breakdown"
    assert any(path.endswith("vat.py") for path in session.modified_files)
    assert session.ended_at is not None
    assert Injection.objects.count() == 0
