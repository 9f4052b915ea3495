"""The MCP handshake answered without the SDK: ``initialize``, ``notifications/initialized``,
the lists a client asks for next (``tools/list``, and ``prompts/list``, ``resources/list``,
``resources/templates/list``, which Claude Code asks for too since the server announces
them, empty) and ``ping``, from a snapshot of what the SDK itself answers.

Claude Code connects its MCP servers when a session starts, and in ``-p`` mode without
waiting for them: a server that has not answered ``initialize`` and ``tools/list`` by the
time the first request goes to the model is missing from that request's tools. Through the
SDK, the first MCP request a web server process gets pays for importing it (seconds on a
busy machine), and every request for a session manager, an event loop and a task group. The
handshake's answers depend on nothing but the tools' signatures and the SDK's version, so
they are recorded once, by the SDK (``checkpoints.mcp.record``), into ``handshake.json``
beside this file, and served from there; the test suite checks the file against the SDK's
live answers for every handshake protocol version, and tells how to write it again
(``python -m checkpoints.mcp.record``) when a tool or the SDK changed.

Only a well-formed single message, with the headers the SDK asks for and a protocol version
the snapshot knows, is answered here; anything else (a batch, a cursor, another version,
a tool call) goes to the SDK, which answers or refuses it as before. Free of the SDK: the
URL configuration imports this.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("handshake.json")
PROTOCOL_HEADER = "mcp-protocol-version"
JSON = "application/json"
LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")

# (status, body or None for an empty 202)
Answer = tuple[int, dict[str, Any] | None]


@cache
def handshake_snapshot() -> dict[str, Any]:
    """The recorded answers: ``versions``, the ``initialize`` result without its
    ``protocolVersion``, and the result of each of ``LISTS``."""
    snapshot: dict[str, Any] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    return snapshot


def _accepts_json(accept: str) -> bool:
    # The SDK's own test, wildcards included.
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(types & {JSON, "application/*", "*/*"})


def handshake_answer(*, content_type: str, accept: str, version: str, body: bytes) -> Answer | None:
    """The answer to one handshake message, or None when the SDK must answer it.

    ``version`` is the ``MCP-Protocol-Version`` header ('' when absent)."""
    if content_type.split(";")[0].strip().lower() != JSON or not _accepts_json(accept):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    method, params = message.get("method"), message.get("params")
    if params is not None and not isinstance(params, dict):
        return None
    snapshot = handshake_snapshot()
    versions: list[str] = snapshot["versions"]
    if version and version not in versions:
        return None
    if "id" not in message:
        # The SDK takes any notification with 202 and nothing more to say.
        return (202, None) if method == "notifications/initialized" else None
    request_id = message["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    params = params or {}
    result: dict[str, Any]
    if method == "initialize":
        offered = params.get("protocolVersion")
        if offered not in versions or not isinstance(params.get("clientInfo"), dict):
            return None
        result = {"protocolVersion": offered, **snapshot["initialize"]}
    elif method in LISTS and not set(params) - {"_meta"}:
        result = snapshot[method]
    elif method == "ping" and not set(params) - {"_meta"}:
        result = {}
    else:
        return None
    return 200, {"jsonrpc": "2.0", "id": request_id, "result": result}
