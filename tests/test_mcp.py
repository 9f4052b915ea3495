"""The MCP server: its tools through a real SDK client, over HTTP (the Django test client, and
a live server) and over stdio (``manage.py mcp_server`` as a subprocess); and the installer's
``--with-mcp``."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.utils import timezone
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from rest_framework.test import APIClient

from checkpoints.mcp.handshake import handshake_snapshot
from checkpoints.mcp.http import cwd_param
from checkpoints.mcp.principal import McpPrincipal
from checkpoints.mcp.record import handshake_record
from checkpoints.mcp.server import _in_django
from checkpoints.mcp.tools import checkpoint_briefs
from checkpoints.models import Checkpoint, Session
from checkpoints.services.config import config_cache_clear, config_get, config_save
from checkpoints.services.tokens import token_create, token_revoke
from hooks.install import InstallError
from hooks.mcp_config import SERVER_NAME, mcp_install, mcp_uninstall
from tests.factories import SessionFactory
from tests.processes import manage
from tests.test_serve import free_port, service_env

PROJECT_DIR = Path(__file__).resolve().parent.parent
SECRET = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
TOOLS = {"session_digest", "session_recall", "checkpoints_list"}

Scenario = Callable[[Client], Awaitable[Any]]


def _django_transport(api: APIClient) -> httpx2.MockTransport:
    """httpx requests answered by the Django test client, in the test's own thread (and so
    inside its database transaction): ``sync_to_async`` under the ``async_to_sync`` below."""

    async def handle(request: httpx2.Request) -> httpx2.Response:
        skipped = {"host", "content-length", "content-type"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skipped}
        response = await sync_to_async(api.generic)(
            request.method,
            request.url.raw_path.decode(),
            data=request.content.decode(),
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        return httpx2.Response(
            response.status_code, headers=dict(response.items()), content=response.content
        )

    return httpx2.MockTransport(handle)


def over_http(token: str, scenario: Scenario, url: str = "/mcp/", **headers: str) -> Any:
    """Run ``scenario`` with an SDK client connected to ``url`` through the test client."""

    async def run() -> Any:
        http = httpx2.AsyncClient(
            transport=_django_transport(APIClient()),
            headers={"Authorization": f"Bearer {token}", **headers},
        )
        async with (
            http,
            Client(streamable_http_client(f"http://testserver{url}", http_client=http)) as client,
        ):
            return await scenario(client)

    return async_to_sync(run)()


def call(tool: str, **arguments: Any) -> Scenario:
    async def scenario(client: Client) -> CallToolResult:
        return await client.call_tool(tool, arguments)

    return scenario


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


# --- over HTTP, through the Django test client -------------------------------------------


def test_tools_are_listed_with_bounded_schemas(owner, make_token):
    async def scenario(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in over_http(make_token(owner, "read"), scenario)}
    assert set(tools) == TOOLS
    digest = tools["session_digest"].input_schema
    assert digest["required"] == ["summary"]
    assert digest["properties"]["summary"]["minLength"] == 1
    assert digest["properties"]["decisions"]["maxItems"] == 50
    assert digest["properties"]["decisions"]["items"]["maxLength"] == 2000
    assert digest["properties"]["files"]["items"]["maxLength"] == 1024
    assert tools["checkpoints_list"].input_schema["properties"]["limit"]["maximum"] == 100
    assert all(tool.description for tool in tools.values())


def test_digest_writes_the_same_checkpoint_the_api_shows(owner, make_token, client_for):
    result = over_http(
        make_token(owner, "read", "write"),
        call(
            "session_digest",
            session_key="mcp-run-1",
            summary=f"## Where I am\nMigrating invoices; token {SECRET}",
            current_task="Migrate the invoices table",
            decisions=["Keep the old column until the backfill ends"],
            next_steps=["Backfill", "Drop the old column"],
            files=["shop/invoices/models.py"],
        ),
    )
    assert not result.is_error, text(result)
    stored = Checkpoint.objects.get()
    assert result.structured_content["checkpoint_id"] == str(stored.id)
    assert stored.trigger == "agent"
    assert stored.session_key == "mcp-run-1"
    assert stored.owner == owner
    assert SECRET not in stored.digest  # redacted before storage
    assert stored.digest.startswith("## Where I am")
    assert stored.decisions == ["Keep the old column until the backfill ends"]
    assert stored.modified_files == ["shop/invoices/models.py"]
    assert Session.objects.get(owner=owner, session_key="mcp-run-1").harness == "api"
    body = client_for(owner, "read").get("/api/checkpoints/mcp-run-1/").json()
    assert [row["id"] for row in body["results"]] == [str(stored.id)]
    assert body["results"][0]["current_task"] == "Migrate the invoices table"


def test_digest_counts_against_the_per_session_cap(owner, make_token):
    config = config_get()
    config.max_checkpoints_per_session = 2
    config_save(config=config)
    config_cache_clear()
    token = make_token(owner, "read", "write")

    async def scenario(client: Client) -> None:
        for number in range(3):
            result = await client.call_tool(
                "session_digest", {"session_key": "capped", "summary": f"step {number}"}
            )
            assert not result.is_error

    over_http(token, scenario)
    assert sorted(Checkpoint.objects.values_list("digest", flat=True)) == ["step 1", "step 2"]


def test_recall_gives_the_latest_checkpoint_and_the_recovery_context(owner, make_token):
    token = make_token(owner, "read", "write")

    async def scenario(client: Client) -> CallToolResult:
        for summary in ("first take", "second take"):
            await client.call_tool(
                "session_digest",
                {"session_key": "s-1", "summary": summary, "decisions": [f"{summary} wins"]},
            )
        return await client.call_tool("session_recall", {"session_key": "s-1"})

    result = over_http(token, scenario)
    assert not result.is_error, text(result)
    data = result.structured_content
    assert data["match"] == "session"
    assert data["checkpoint"]["digest"] == "second take"
    assert data["context"].startswith("## Session Recovery Context")
    assert "second take wins" in data["context"]
    assert text(result).startswith("## Session Recovery Context")
    assert '"digest": "second take"' in text(result)


def test_recall_and_list_of_a_project(owner, make_token):
    token = make_token(owner, "read", "write")
    digest = call("session_digest", session_key="p-1", summary="Project work\nmore")
    over_http(token, digest, **{"X-Signet-Session": "p-1"})
    Session.objects.filter(session_key="p-1").update(project_normalized="/src/shop")
    Checkpoint.objects.update(project_normalized="/src/shop")

    recalled = over_http(token, call("session_recall", project="/src/shop/"))
    assert recalled.structured_content["match"] == "project"
    assert recalled.structured_content["checkpoint"]["digest"] == "Project work\nmore"
    listed = over_http(token, call("checkpoints_list", project="/src/shop", limit=5))
    rows = listed.structured_content["checkpoints"]
    assert [(row["session_key"], row["summary"]) for row in rows] == [("p-1", "Project work")]
    # Without arguments: the project of the session the header names.
    current = over_http(token, call("checkpoints_list"), **{"X-Signet-Session": "p-1"})
    assert current.structured_content["project"] == "/src/shop"
    assert len(current.structured_content["checkpoints"]) == 1


def test_the_session_header_binds_the_digest(owner, make_token):
    token = make_token(owner, "read", "write")
    result = over_http(
        token, call("session_digest", summary="bound"), **{"X-Signet-Session": "hdr-1"}
    )
    assert not result.is_error, text(result)
    assert Checkpoint.objects.get().session_key == "hdr-1"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"session_key": "k", "summary": ""}, "summary"),
        ({"session_key": "k", "summary": "x", "decisions": ["d"] * 51}, "decisions"),
        ({"session_key": "k", "summary": "x", "decisions": ["d" * 2001]}, "decisions"),
        ({"session_key": "bad key", "summary": "x"}, "session_key"),
        ({"session_key": "k", "summary": "x", "unknown": 1}, ""),
        ({"summary": "x"}, "session_key"),  # no session known over HTTP without the header
    ],
)
def test_bad_arguments_are_tool_errors(owner, make_token, arguments, message):
    result = over_http(make_token(owner, "read", "write"), call("session_digest", **arguments))
    if arguments.get("unknown"):  # extra arguments are ignored, as the SDK does
        assert not result.is_error
        return
    assert result.is_error
    assert message in text(result)
    assert not Checkpoint.objects.exists()


def test_digest_needs_the_write_scope(owner, make_token):
    result = over_http(
        make_token(owner, "read"), call("session_digest", session_key="k", summary="x")
    )
    assert result.is_error
    assert "'write' scope" in text(result)
    assert not Checkpoint.objects.exists()


def test_another_owners_session_is_not_visible(owner, teammate, make_token):
    over_http(make_token(owner), call("session_digest", session_key="mine", summary="private"))
    token = make_token(teammate, "read", "write")
    recalled = over_http(token, call("session_recall", session_key="mine"))
    assert recalled.is_error
    assert "No session 'mine'" in text(recalled)
    listed = over_http(token, call("checkpoints_list", session_key="mine"))
    assert listed.structured_content["checkpoints"] == []
    assert "private" not in text(listed)


def test_requests_without_a_valid_token_are_refused(owner, make_token):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    api = APIClient()
    missing = api.post("/mcp/", body, format="json")
    assert missing.status_code == 401
    assert set(missing.json()) == {"error", "detail"}
    api.credentials(HTTP_AUTHORIZATION="Bearer sig_not-a-token")
    assert api.post("/mcp/", body, format="json").status_code == 401
    ingest_only = APIClient()
    ingest_only.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'ingest')}")
    assert ingest_only.post("/mcp/", body, format="json").status_code == 403


@pytest.mark.parametrize("url", ["/mcp/", "/mcp"])
def test_one_json_rpc_post_is_answered_in_json(owner, make_token, url):
    """At /mcp/ and at /mcp, as clients are often configured: a redirect would turn the
    POST into a GET."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'read')}")
    response = api.post(
        url,
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}},
        format="json",
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["id"] == 7
    assert {tool["name"] for tool in body["result"]["tools"]} == TOOLS
    assert api.get(url).status_code == 405
    # As Claude Code opens the stream: a 406 here would make it drop the connection.
    assert api.get(url, headers={"Accept": "text/event-stream"}).status_code == 405


def test_the_handshake_snapshot_is_what_the_sdk_answers():
    assert handshake_record() == handshake_snapshot(), (
        "A tool or the SDK changed: write the snapshot again with "
        "`python -m checkpoints.mcp.record`."
    )


def test_the_handshake_is_answered_without_the_sdk(owner, make_token, monkeypatch):
    """A cold process would import the SDK for it: seconds before Claude Code sees a tool."""

    def no_sdk(*args: Any) -> None:
        raise AssertionError("the handshake went through the SDK")

    monkeypatch.setattr("checkpoints.mcp.http._serve", no_sdk)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'read')}")
    accept = {"Accept": "application/json, text/event-stream"}
    version = {**accept, "MCP-Protocol-Version": "2025-11-25"}
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cc"}}

    def post(message: dict[str, Any], headers: dict[str, str]) -> Any:
        return api.post("/mcp/", message, format="json", headers=headers)

    initialize = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, accept)
    initialized = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, version)
    listed = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, version)

    assert initialize.status_code == 200
    assert initialize.json()["result"]["protocolVersion"] == "2025-11-25"
    assert initialize.json()["result"]["serverInfo"]["name"] == "signet"
    assert initialized.status_code == 202
    assert initialized.content == b""
    assert listed.status_code == 200
    assert listed["Content-Type"] == "application/json"
    assert {tool["name"] for tool in listed.json()["result"]["tools"]} == TOOLS
    assert listed.json()["id"] == 1


def test_a_server_process_loads_the_mcp_view_before_its_first_request(tmp_path):
    """A process's first request used to import the whole URLconf (every view, DRF) first."""
    probe = "import sys, signet_site.wsgi; print('checkpoints.mcp.http' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_DIR, env=service_env(tmp_path, free_port()),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == "True", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("query", "cwd"),
    [
        ("cwd=/home/a/shop", "/home/a/shop"),
        ("session=k&cwd=/home/a/%E9%A1%B9%E7%9B%AE%20x/b&c=d", "/home/a/项目 x/b&c=d"),
        ("cwd=", ""),
        ("", ""),
        ("xcwd=/a", ""),
    ],
)
def test_the_cwd_parameter_runs_to_the_end_of_the_query(query, cwd):
    assert cwd_param(query) == cwd


def test_the_url_names_the_agents_folder_and_so_its_session(owner, make_token):
    """Claude Code puts ``$PWD`` in the URL the installer writes: with two sessions live, the
    digest goes to the one in the agent's project, not merely the latest."""
    now = timezone.now()
    mine = SessionFactory(
        owner=owner, project="/home/a/项目 x", project_normalized="/home/a/项目 x",
        last_activity_at=now - timedelta(minutes=1),
    )  # fmt: skip
    SessionFactory(owner=owner, last_activity_at=now)
    token = make_token(owner, "read", "write")
    url = "/mcp/?cwd=/home/a/%E9%A1%B9%E7%9B%AE%20x/src"

    result = over_http(token, call("session_digest", summary="in my project"), url=url)

    assert not result.is_error, text(result)
    assert Checkpoint.objects.get().session_key == mine.session_key


def test_without_a_folder_the_digest_goes_to_the_latest_live_session(owner, teammate, make_token):
    now = timezone.now()
    latest = SessionFactory(owner=owner, last_activity_at=now - timedelta(minutes=1))
    SessionFactory(owner=owner, last_activity_at=now - timedelta(minutes=5))
    SessionFactory(
        owner=owner, started_at=now - timedelta(hours=1), last_activity_at=now, ended_at=now
    )  # over
    SessionFactory(owner=teammate, last_activity_at=now)  # someone else's

    result = over_http(make_token(owner, "read", "write"), call("session_digest", summary="x"))

    assert not result.is_error, text(result)
    assert Checkpoint.objects.get().session_key == latest.session_key


# --- a real server, a real client --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_over_a_live_server(live_server, owner, make_token):
    token = make_token(owner, "read", "write")

    async def run() -> tuple[set[str], CallToolResult, CallToolResult]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        url = f"{live_server.url}/mcp/"
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            written = await client.call_tool(
                "session_digest", {"session_key": "live-1", "summary": "over the wire"}
            )
            recalled = await client.call_tool("session_recall", {"session_key": "live-1"})
            return names, written, recalled

    names, written, recalled = anyio.run(run)
    assert names == TOOLS
    assert not written.is_error, text(written)
    assert recalled.structured_content["checkpoint"]["digest"] == "over the wire"
    assert Checkpoint.objects.get(session_key="live-1").trigger == "agent"


@pytest.mark.slow
def test_over_the_service_as_make_run_starts_it(tmp_path):
    """``manage.py serve``: the WSGI server with blocking threads, several processes."""
    port = free_port()
    env = service_env(tmp_path, port, WEB_CONCURRENCY="2", LOG_LEVEL="WARNING")
    manage(env, "migrate", "--noinput", "-v0")
    token = manage(env, "create_token", "--user", "alice", "--scopes", "read,write")
    token = token.strip().splitlines()[-1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-scheduler"],
        cwd=PROJECT_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    async def run() -> tuple[CallToolResult, CallToolResult]:
        with anyio.fail_after(90):
            while True:
                try:
                    async with httpx2.AsyncClient() as probe:
                        if (await probe.get(f"{url}/healthz")).status_code == 200:
                            break
                except httpx2.TransportError:
                    await anyio.sleep(0.3)
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with http, Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as client:
            written = await client.call_tool(
                "session_digest", {"session_key": "served-1", "summary": "through granian"}
            )
            listed = await client.call_tool("checkpoints_list", {"session_key": "served-1"})
            return written, listed

    try:
        written, listed = anyio.run(run)
        unauthenticated = httpx2.post(f"{url}/mcp/", json={"jsonrpc": "2.0", "id": 1})
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        log.close()
    assert not written.is_error, (text(written), (tmp_path / "serve.log").read_text()[-4000:])
    rows = listed.structured_content["checkpoints"]
    assert [row["summary"] for row in rows] == ["through granian"]
    assert unauthenticated.status_code == 401
    assert set(unauthenticated.json()) == {"error", "detail"}


# --- stdio: manage.py mcp_server ---------------------------------------------------------


def _stdio_env(tmp_path: Path) -> dict[str, str]:
    env = service_env(tmp_path, free_port(), LOG_LEVEL="WARNING")
    for args in (["migrate", "--noinput", "-v0"],):
        subprocess.run(
            [sys.executable, "manage.py", *args], cwd=PROJECT_DIR, env=env, check=True, timeout=120
        )
    return env


def over_stdio(env: dict[str, str], scenario: Scenario, cwd: Path = PROJECT_DIR) -> Any:
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(PROJECT_DIR / "manage.py"), "mcp_server"],
        env=env,
        cwd=cwd,
    )

    async def run() -> Any:
        async with Client(params) as client:
            return await scenario(client)

    return anyio.run(run)


@pytest.mark.slow
def test_over_stdio(tmp_path):
    env = _stdio_env(tmp_path)
    token = manage(env, "create_token", "--user", "alice", "--scopes", "read,write")
    env["SIGNET_TOKEN"] = token.strip().splitlines()[-1]
    project = tmp_path / "shop"
    (project / "src").mkdir(parents=True)

    async def first(client: Client) -> tuple[set[str], CallToolResult, CallToolResult]:
        names = {tool.name for tool in (await client.list_tools()).tools}
        missing = await client.call_tool("session_digest", {"summary": "no session yet"})
        written = await client.call_tool(
            "session_digest",
            {"session_key": "stdio-1", "summary": f"Over stdio {SECRET}", "next_steps": ["ship"]},
        )
        return names, missing, written

    names, missing, written = over_stdio(env, first, cwd=project)
    assert names == TOOLS
    assert missing.is_error
    assert "session_key" in text(missing)
    assert not written.is_error, text(written)
    assert written.structured_content["project"] == str(project)

    async def second(client: Client) -> tuple[CallToolResult, CallToolResult, CallToolResult]:
        # No key given: the live session whose project holds the working directory.
        digest = await client.call_tool("session_digest", {"summary": "found by folder"})
        recalled = await client.call_tool("session_recall", {})
        listed = await client.call_tool("checkpoints_list", {"limit": 5})
        return digest, recalled, listed

    digest, recalled, listed = over_stdio(env, second, cwd=project / "src")
    assert digest.structured_content["session_key"] == "stdio-1", text(digest)
    assert recalled.structured_content["checkpoint"]["digest"] == "found by folder"
    summaries = [row["summary"] for row in listed.structured_content["checkpoints"]]
    assert summaries[0] == "found by folder"
    assert SECRET not in summaries[1]
    assert "[REDACTED]" in summaries[1] or "Over stdio" in summaries[1]

    env["SIGNET_SESSION_KEY"] = "stdio-2"
    bound = over_stdio(env, call("session_digest", summary="from the environment"), cwd=project)
    assert bound.structured_content["session_key"] == "stdio-2"
    stored = manage(
        env,
        "shell",
        "-c",
        "from checkpoints.models import Checkpoint; import json; print(json.dumps(sorted("
        "[c.session_key, c.trigger, c.digest] for c in Checkpoint.objects.all())))",
    )
    rows = json.loads(stored.strip().splitlines()[-1])
    assert len(rows) == 3
    assert {trigger for _, trigger, _ in rows} == {"agent"}
    assert all(SECRET not in digest for _, _, digest in rows)


@pytest.mark.slow
def test_stdio_refuses_to_start_without_a_valid_token(tmp_path):
    env = _stdio_env(tmp_path)
    command = [sys.executable, "manage.py", "mcp_server"]
    env.pop("SIGNET_TOKEN", None)
    done = subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "SIGNET_TOKEN" in done.stderr
    assert done.stdout == ""
    env["OTHER_TOKEN"] = "sig_not-a-token"
    done = subprocess.run(
        [*command, "--token-env", "OTHER_TOKEN"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "invalid or revoked" in done.stderr
    ingest = manage(env, "create_token", "--user", "alice", "--scopes", "ingest")
    env["SIGNET_TOKEN"] = ingest.strip().splitlines()[-1]
    done = subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "'read' scope" in done.stderr


# --- the installer: install_hooks claude-code registers the service's /mcp/ ---------------

FOREIGN = {
    "numStartups": 34,
    "projects": {"/src/x": {"mcpServers": {"local-one": {"command": "x"}}}},
    "mcpServers": {"github": {"type": "stdio", "command": "npx", "args": ["-y", "gh"], "env": {}}},
    "theme": "dark",
}
OLD_STDIO_ENTRY = {
    "type": "stdio",
    "command": "/venv/bin/python",
    "args": ["/src/signet/manage.py", "mcp_server", "--token-env", "SIGNET_TOKEN"],
}


def test_mcp_install_merges_is_idempotent_backs_up_and_uninstalls(tmp_path):
    path = tmp_path / ".claude.json"
    original = json.dumps(FOREIGN, indent=2) + "\n"
    path.write_text(original)
    first = mcp_install(path, url="https://signet.example:8443/", token_env="MY_TOKEN")
    assert first.changed
    assert first.backup_path is not None
    assert first.backup_path.read_text() == original
    data = json.loads(path.read_text())
    assert data["mcpServers"]["github"] == FOREIGN["mcpServers"]["github"]
    assert {k: v for k, v in data.items() if k != "mcpServers"} == {
        k: v for k, v in FOREIGN.items() if k != "mcpServers"
    }
    # Nothing runs on the agent's machine: Claude Code talks to the service's endpoint, with
    # the token's variable expanded by Claude Code (its ${NAME} syntax), never its value.
    assert data["mcpServers"][SERVER_NAME] == {
        "type": "http",
        "url": "https://signet.example:8443/mcp/?cwd=${PWD:-}",
        "headers": {"Authorization": "Bearer ${MY_TOKEN}"},
    }
    after_first = path.read_bytes()
    backups = sorted(tmp_path.glob(".claude.json.signet-backup-*"))

    second = mcp_install(path, url="https://signet.example:8443", token_env="MY_TOKEN")
    assert not second.changed
    assert path.read_bytes() == after_first
    assert sorted(tmp_path.glob(".claude.json.signet-backup-*")) == backups

    removed = mcp_uninstall(path)
    assert removed.changed
    assert json.loads(path.read_text()) == FOREIGN
    assert not mcp_uninstall(path).changed


def test_mcp_install_upgrades_an_older_stdio_entry_in_place(tmp_path):
    path = tmp_path / ".claude.json"
    path.write_text(
        json.dumps({"mcpServers": {SERVER_NAME: OLD_STDIO_ENTRY, **FOREIGN["mcpServers"]}})
    )

    result = mcp_install(path, url="http://10.0.0.5:8000")

    assert result.changed
    assert result.removed == [SERVER_NAME]
    servers = json.loads(path.read_text())["mcpServers"]
    assert list(servers) == [SERVER_NAME, "github"]  # where it was
    assert servers[SERVER_NAME]["url"] == "http://10.0.0.5:8000/mcp/?cwd=${PWD:-}"
    assert "command" not in servers[SERVER_NAME]
    # An older install's entry is Signet's to remove, too.
    path.write_text(json.dumps({"mcpServers": {SERVER_NAME: OLD_STDIO_ENTRY}}))
    assert mcp_uninstall(path).changed
    assert json.loads(path.read_text()) == {"mcpServers": {}}


@pytest.mark.parametrize(
    "foreign",
    [
        {"command": "other"},
        {"type": "http", "url": "https://signet.example/api/", "headers": {}},
        {
            "type": "http",
            "url": "https://mcp.example/mcp/",
            "headers": {"Authorization": "Bearer x"},
        },
        {"type": "sse", "url": "https://mcp.example/mcp/"},
    ],
)
def test_mcp_install_never_overwrites_a_foreign_server_of_the_same_name(tmp_path, foreign):
    path = tmp_path / ".claude.json"
    path.write_text(json.dumps({"mcpServers": {SERVER_NAME: foreign}}))
    before = path.read_bytes()
    with pytest.raises(InstallError, match="not Signet's"):
        mcp_install(path)
    assert not mcp_uninstall(path).changed
    assert path.read_bytes() == before


def test_install_hooks_registers_mcp_by_default_and_uninstall_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNET_TOKEN", "sig_live_secret_value_123")
    settings, config, memory = (
        tmp_path / "settings.json",
        tmp_path / ".claude.json",
        tmp_path / "CLAUDE.md",
    )
    memory.write_text("# Mine\n")
    paths = [
        "--settings-file",
        str(settings),
        "--mcp-config",
        str(config),
        "--claude-md",
        str(memory),
    ]
    out = io.StringIO()
    call_command(
        "install_hooks", "claude-code", "--url", "http://10.0.0.5:8000", *paths, stdout=out
    )
    entry = json.loads(config.read_text())["mcpServers"][SERVER_NAME]
    assert entry["url"] == "http://10.0.0.5:8000/mcp/?cwd=${PWD:-}"
    assert entry["headers"] == {"Authorization": "Bearer ${SIGNET_TOKEN}"}
    assert "sig_live_secret_value_123" not in config.read_text()
    assert "session_digest" in memory.read_text()
    assert memory.read_text().startswith("# Mine\n")
    assert "--scopes ingest,read,write" in out.getvalue()  # session_digest writes
    snapshot = [p.read_bytes() for p in (settings, config, memory)]
    call_command("install_hooks", "claude-code", "--url", "http://10.0.0.5:8000", *paths)
    assert [p.read_bytes() for p in (settings, config, memory)] == snapshot
    call_command(
        "install_hooks", "claude-code", "--with-mcp", "--url", "http://10.0.0.5:8000", *paths
    )
    assert [p.read_bytes() for p in (settings, config, memory)] == snapshot  # still accepted

    call_command("install_hooks", "claude-code", "--uninstall", "--no-mcp", *paths)  # hooks only
    assert SERVER_NAME in json.loads(config.read_text())["mcpServers"]
    call_command("install_hooks", "claude-code", "--uninstall", *paths)
    assert SERVER_NAME not in json.loads(config.read_text()).get("mcpServers", {})
    assert memory.read_text() == "# Mine\n"
    assert os.path.exists(settings)


def test_install_hooks_no_mcp_leaves_the_claude_json_alone(tmp_path):
    config, memory = tmp_path / ".claude.json", tmp_path / "CLAUDE.md"
    call_command(
        "install_hooks", "claude-code", "--no-mcp", "--settings-file", str(tmp_path / "s.json"),
        "--mcp-config", str(config), "--claude-md", str(memory), stdout=io.StringIO(),
    )  # fmt: skip
    assert not config.exists()
    assert not memory.exists()


def test_install_hooks_keeps_the_hooks_when_a_foreign_signet_server_is_there(tmp_path):
    settings, config = tmp_path / "settings.json", tmp_path / ".claude.json"
    config.write_text(json.dumps({"mcpServers": {SERVER_NAME: {"command": "other"}}}))
    before = config.read_bytes()
    err = io.StringIO()
    call_command(
        "install_hooks", "claude-code", "--settings-file", str(settings), "--mcp-config",
        str(config), "--claude-md", str(tmp_path / "CLAUDE.md"), stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert "not Signet's" in err.getvalue()
    assert config.read_bytes() == before
    assert json.loads(settings.read_text())["hooks"]


def test_a_stdio_server_stops_honouring_a_token_revoked_after_it_started(owner):
    """The stdio server lives as long as the agent's session: each call checks its token
    again, so a revoked token (or a deactivated owner) stops working at once."""
    token, raw = token_create(owner=owner, name="stdio", scopes=["read"])
    principal = McpPrincipal(owner=owner, scopes=frozenset(["read"]), raw_token=raw)
    arguments = {"session_key": "", "project": "/w/app", "limit": 5}
    assert _in_django(checkpoint_briefs, principal, arguments, False)["checkpoints"] == []
    token_revoke(token=token)
    with pytest.raises(ToolError, match="revoked"):
        _in_django(checkpoint_briefs, principal, arguments, False)
