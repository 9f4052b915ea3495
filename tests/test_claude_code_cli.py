"""The real Claude Code CLI (``tests/claude_cli.py``: pinned, from npm) with the hooks the
README installs, against the real service and a stand-in model API that records what the
model received. Each finding of the CLI's first real run has a test here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from checkpoints.models import Injection, Session
from checkpoints.services.tokens import token_create
from tests.claude_cli import CLAUDE_CODE_VERSION, PACKAGE, ClaudeCode, git_project, npm_install
from tests.factories import UserFactory
from tests.model_api import ModelAPI, text, tool_use
from tests.test_hook_client_e2e import Service, free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECOVERY = "## Session Recovery Context"


@pytest.fixture(scope="session")
def claude_executable() -> Path:
    return npm_install(PACKAGE, CLAUDE_CODE_VERSION, binary="claude")


@pytest.fixture
def service(transactional_db: Any) -> Iterator[Service]:
    service = Service(free_port())
    service.start()
    yield service
    service.stop()
    connections.close_all()


@pytest.fixture
def model() -> Iterator[ModelAPI]:
    api = ModelAPI().start()
    yield api
    api.stop()


@pytest.fixture
def claude(claude_executable, service, model, tmp_path) -> ClaudeCode:
    """Claude Code in a fresh HOME with the hooks installed for alice's token."""
    owner: Any = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="laptop", scopes=["ingest", "read", "write"])
    cli = ClaudeCode(
        executable=claude_executable,
        home=tmp_path / "home",
        project=git_project(tmp_path / "invoices"),
        model=model,
        env={"SIGNET_TOKEN": token, "SIGNET_OUTBOX": str(tmp_path / "outbox.jsonl")},
    )
    cli.home.mkdir()
    cli.install_hooks(service.url)
    return cli


def test_a_headless_turn_reaches_the_service_through_every_installed_hook(claude, model):
    model.script.append([
        text("Writing it."),
        tool_use("Write", {"file_path": str(claude.project / "vat.py"), "content": "RATE = 20\n"}),
    ])  # fmt: skip
    model.script.append([text("Wrote vat.py.")])

    run = claude.run("Add a VAT rate constant")

    assert run.returncode == 0, run.stderr
    session = Session.objects.get(session_key=run.session_id)
    assert session.prompt_count == 1
    assert session.git_branch == "feat/vat-breakdown"
    assert any(path.endswith("vat.py") for path in session.modified_files)
    assert session.ended_at is not None
    assert Injection.objects.count() == 0
