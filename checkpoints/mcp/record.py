"""Records the MCP handshake snapshot (``handshake.json``) from the SDK itself, through the
HTTP view's own bridge to it: ``python -m checkpoints.mcp.record`` after a tool or the SDK
changed (the test suite says when). Apart from ``handshake``, which serves the snapshot and
must not import the view."""

from __future__ import annotations

import json
from typing import Any

from checkpoints.mcp.handshake import JSON, LISTS, PROTOCOL_HEADER, SNAPSHOT


def handshake_record() -> dict[str, Any]:
    """Ask the SDK, through the HTTP view's own bridge, for its handshake answers under each
    protocol version it negotiates by ``initialize``; the snapshot to write. ValueError when
    they differ between versions (other than the version itself): the snapshot holds one."""
    from asgiref.sync import async_to_sync
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    from checkpoints.mcp.http import _serve  # after django.setup() when run as a script

    def ask(message: dict[str, Any], version: str) -> dict[str, Any]:
        headers = [(b"content-type", JSON.encode()), (b"accept", JSON.encode())]
        if version:
            headers.append((PROTOCOL_HEADER.encode(), version.encode()))
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/mcp/", "raw_path": b"/mcp/",
            "query_string": b"", "root_path": "", "headers": headers,
            "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 0),
        }  # fmt: skip
        status, _, body = async_to_sync(_serve)(scope, json.dumps(message).encode())
        if status != 200:
            raise ValueError(f"the SDK answered {message['method']} with {status}: {body!r}")
        result: dict[str, Any] = json.loads(body)["result"]
        return result

    recorded: dict[str, Any] | None = None
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        client = {"name": "signet-handshake", "version": "1"}
        params = {"protocolVersion": version, "capabilities": {}, "clientInfo": client}
        answers = {
            "initialize": ask(
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, ""
            )
        }
        if answers["initialize"].pop("protocolVersion") != version:
            raise ValueError(f"the SDK does not echo protocol version {version}")
        for method in LISTS:
            answers[method] = ask({"jsonrpc": "2.0", "id": 2, "method": method}, version)
        if recorded is not None and answers != recorded:
            raise ValueError(f"the handshake differs under protocol version {version}")
        recorded = answers
    assert recorded is not None
    for method in LISTS:
        if recorded[method] != ask({"jsonrpc": "2.0", "id": 3, "method": method}, ""):
            raise ValueError(f"{method} differs without a protocol version header")
    return {"versions": list(HANDSHAKE_PROTOCOL_VERSIONS), **recorded}


def handshake_write() -> None:
    """Record the handshake with the SDK and write it to ``SNAPSHOT``."""
    text = json.dumps(handshake_record(), indent=1, ensure_ascii=False, sort_keys=True)
    SNAPSHOT.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":  # python -m checkpoints.mcp.record
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signet_site.settings")
    django.setup()
    handshake_write()
