"""The real Claude Code CLI (``tests/claude_cli.py``) with the MCP server the README installs:
the service's own ``/mcp/`` endpoint, reached over HTTP, and the agent's ``session_digest``.

Nothing sets ``MCP_CONNECTION_NONBLOCKING``: in ``-p`` mode Claude Code does not wait for its
MCP servers, so the first request to the model lists the signet tools only when the service
has answered the handshake by then.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from checkpoints.models import Checkpoint
from tests.model_api import text, tool_use

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DIGEST_TOOL = "mcp__signet__session_digest"
DIGEST = {
    "summary": "Adding the VAT breakdown to the invoice PDF; the totals table is done.",
    "current_task": "Render the per-rate VAT lines under the totals.",
    "decisions": ["Round per line, not per invoice: the tax office's rule for B2B."],
    "next_steps": ["Render the VAT lines", "Add a test for mixed rates"],
}


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def test_the_agent_writes_its_digest_through_the_services_mcp_endpoint(
    claude, model_api, hook_service, tmp_path
):
    # The installer's checkout has a data folder of its own (an empty one here), not the
    # service's: what it registers runs nothing on this machine (an older install's stdio
    # server opened the checkout's database and crashed), and no database appears there.
    installer_data = tmp_path / "installer-data"
    claude.install_hooks(hook_service.url, env={"SIGNET_DATA_DIR": str(installer_data)})
    registered = json.loads((claude.home / ".claude.json").read_text())["mcpServers"]["signet"]
    assert registered["type"] == "http"
    assert "command" not in registered
    assert registered["url"].startswith(f"{hook_service.url}/mcp/")
    assert claude.env["SIGNET_TOKEN"] not in (claude.home / ".claude.json").read_text()
    claude.env["PWD"] = str(claude.project)  # as the shell that starts Claude Code exports it
    model_api.script.append([text("Saving a digest."), tool_use(DIGEST_TOOL, DIGEST)])
    model_api.script.append([text("Saved.")])

    run = claude.run("Carry on with the VAT work")

    assert run.returncode == 0, run.stderr
    turns = model_api.conversation_requests()
    assert DIGEST_TOOL in tool_names(turns[0]), tool_names(turns[0])
    results = [
        block
        for message in turns[1]["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert results
    assert not results[-1].get("is_error"), results
    checkpoint = Checkpoint.objects.get(trigger="agent")
    assert checkpoint.session_key == run.session_id
    assert checkpoint.digest == DIGEST["summary"]
    assert checkpoint.current_task == DIGEST["current_task"]
    assert checkpoint.decisions == DIGEST["decisions"]
    assert checkpoint.next_steps == DIGEST["next_steps"]
    assert not list(installer_data.glob("*.sqlite3*"))
    # Claude Code expanded ${SIGNET_TOKEN} when it connected; it wrote the value nowhere.
    token = claude.env["SIGNET_TOKEN"].encode()
    written = [path for path in claude.home.rglob("*") if path.is_file()]
    assert written
    assert [path for path in written if token in path.read_bytes()] == []
