"""``/mcp/``: the MCP server over streamable HTTP, behind the API's bearer tokens.

The service is a WSGI application (granian's WSGI interface, a few blocking threads per
process), and the SDK's streamable HTTP transport is an ASGI application. This view bridges
the two one request at a time, in the SDK's **stateless, JSON-response** mode:

- DRF authenticates the bearer token, checks the ``read`` scope and throttles the request
  exactly as for the API (so a refusal is the API's ``{"error", "detail"}``); the
  ``session_digest`` tool itself asks for ``write``.
- The request is handed to a fresh ``StreamableHTTPSessionManager(stateless=True,
  json_response=True)`` on a synthesized ASGI scope, driven to completion by
  ``async_to_sync``; the ASGI response is collected and returned as a Django response.

The handshake (``initialize``, ``notifications/initialized``, ``tools/list``, ``ping``) is
answered from ``handshake.py``'s snapshot without the SDK: Claude Code does not wait for its
MCP servers in ``-p`` mode, and a handshake that pays for the SDK's import misses the
session's first request to the model.

Stateless because nothing may outlive a WSGI request (no session table to share between
processes, no stream to keep open on a blocking thread): every POST is self-contained,
``initialize`` included, and GET (the server-to-client stream) answers 405. JSON responses
because a WSGI response is sent once, whole. ``async_to_sync`` runs the SDK on a private
event loop while the tools' database work comes back to this request's thread (asgiref's
thread-sensitive mode), so it uses the request's connection and transaction like any view.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import unquote

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.views import APIView

from checkpoints.api.errors import error_response
from checkpoints.harnesses.base import identifier_problem
from checkpoints.mcp.handshake import PROTOCOL_HEADER, handshake_answer
from checkpoints.mcp.principal import McpPrincipal, principal_bind
from checkpoints.models import ApiToken

SESSION_HEADER = "X-Signet-Session"
SESSION_PARAM = "session"
# The agent's working folder, as the installer writes it last in the URL (``?cwd=${PWD:-}``).
CWD_PARAM = "cwd="
# A session manager per request would log its start and its stop at INFO for every call.
logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)


def _asgi_scope(request: Request) -> dict[str, Any]:
    django = request._request
    headers: list[tuple[bytes, bytes]] = []
    for key, value in django.META.items():
        if key.startswith("HTTP_"):
            name = key[5:].replace("_", "-").lower()
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = key.replace("_", "-").lower()
        else:
            continue
        headers.append((name.encode("latin-1"), str(value).encode("latin-1")))
    port = int(django.get_port() or 80)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": django.method or "POST",
        "scheme": django.scheme or "http",
        "path": django.path,
        "raw_path": django.path.encode("utf-8"),
        "query_string": django.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "server": (django.get_host().rsplit(":", 1)[0], port),
        "client": (django.META.get("REMOTE_ADDR", ""), 0),
    }


Headers = list[tuple[bytes, bytes]]


def cwd_param(query_string: str) -> str:
    """The ``cwd`` parameter of a query string, taken to the end of it: Claude Code expands
    ``${PWD}`` into the URL as it is (only percent-encoding what a URL cannot hold), so a
    folder name's ``&`` stays in the value. '' when there is none."""
    if query_string.startswith(CWD_PARAM):
        start = len(CWD_PARAM)
    else:
        found = query_string.find("&" + CWD_PARAM)
        if found < 0:
            return ""
        start = found + 1 + len(CWD_PARAM)
    return unquote(query_string[start:], errors="replace")


async def _serve(scope: dict[str, Any], body: bytes) -> tuple[int, Headers, bytes]:
    """Run one request through a stateless session manager; the response it sent."""
    # The SDK takes about a second to import: only processes that serve MCP pay for it.
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from checkpoints.mcp.server import mcp_server_get

    manager = StreamableHTTPSessionManager(
        app=mcp_server_get()._lowlevel_server,  # the SDK's own way to mount an MCPServer
        stateless=True,
        json_response=True,
    )
    sent = False
    status = 500
    headers: Headers = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    async with manager.run():
        await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    return status, headers, b"".join(chunks)


class McpApi(APIView):
    """``POST /mcp/``: one MCP JSON-RPC message (or batch), answered in JSON."""

    required_scope = "read"
    schema = None  # not part of the REST API's OpenAPI document

    def post(self, request: Request) -> HttpResponse:
        token = request.auth
        assert isinstance(token, ApiToken)  # token authentication guarantees it
        session_key = (
            request.headers.get(SESSION_HEADER) or request.query_params.get(SESSION_PARAM) or ""
        ).strip()
        problem = identifier_problem(session_key) if session_key else ""
        if problem:
            return error_response("invalid", f"{SESSION_HEADER}: a session key {problem}", 400)
        django = request._request
        answer = handshake_answer(
            content_type=django.META.get("CONTENT_TYPE", ""),
            accept=request.headers.get("Accept", ""),
            version=request.headers.get(PROTOCOL_HEADER, ""),
            body=django.body,
        )
        if answer is not None:
            status, message = answer
            body = b"" if message is None else json.dumps(message, ensure_ascii=False).encode()
            return HttpResponse(body, status=status, content_type="application/json")
        principal = McpPrincipal(
            owner=token.owner,
            scopes=frozenset(token.scopes),
            session_key=session_key,
            cwd=cwd_param(django.META.get("QUERY_STRING", "")),
        )
        scope = _asgi_scope(request)
        with principal_bind(principal):
            status, headers, body = async_to_sync(_serve)(scope, request._request.body)
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name.lower() not in (b"content-length", b"transfer-encoding"):
                response[name.decode("latin-1")] = value.decode("latin-1")
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # Claude Code opens the server-to-client stream with only text/event-stream accepted:
        # it must get the 405 that says there is none, not a 406, on which it drops the
        # connection while the tools are being listed.
        return super().perform_content_negotiation(request, force=True)

    def get(self, request: Request) -> HttpResponse:
        # Stateless: there is no server-to-client stream to open.
        return error_response(
            "method_not_allowed", "This MCP endpoint is stateless: POST only.", 405
        )

    def delete(self, request: Request) -> HttpResponse:
        return self.get(request)
