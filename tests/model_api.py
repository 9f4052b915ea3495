"""A stand-in for the Anthropic Messages API on loopback, for the tests that drive the real
Claude Code CLI: the one part of a session we cannot reach from here.

It answers ``POST /v1/messages`` as the API streams it (server-sent events: ``message_start``,
``content_block_start`` / ``_delta`` / ``_stop`` with ``text_delta`` or ``input_json_delta``,
``message_delta`` with the usage, ``message_stop``) and ``POST /v1/messages/count_tokens``, and
records every request so that a test asserts on what the model received.

What it answers is scripted: ``ModelAPI.script`` is a queue of turns, each a list of blocks
(``text(...)`` or ``tool_use(...)``). A request that carries the CLI's tools and finds the
queue empty gets a short text, so a turn always ends. Requests without the conversation's
tools (a title, a topic check) and a compaction's summary request never take from the
queue: the compaction gets ``compact_summary``, anything else a one-line text.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Claude Code asks for the summary with this instruction (2.1.x: "a detailed summary of the
# conversation so far"); the stand-in answers it with a summary in the sections Claude
# Code's own prompt asks for.
COMPACT_MARK = "summary of the conversation"
DEFAULT_SUMMARY = (
    "<analysis>Looked at the conversation.</analysis>\n<summary>\n"
    "1. Primary Request and Intent:\n   The user asked for the work in this session.\n"
    "2. Pending Tasks:\n   - None recorded.\n"
    "3. Current Work:\n   The last turn.\n</summary>"
)


def text(value: str) -> dict[str, Any]:
    """A text block of a scripted turn."""
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A tool call of a scripted turn; its id is given when it is sent."""
    return {"type": "tool_use", "name": name, "input": tool_input}


@dataclass
class Usage:
    """The usage each response reports: the context grows by ``step`` per response."""

    input_tokens: int = 12
    cache_read_input_tokens: int = 20_000
    output_tokens: int = 40
    step: int = 1_000


@dataclass
class ModelAPI:
    """The stand-in server; ``start()`` it, point ``ANTHROPIC_BASE_URL`` at ``url``."""

    script: deque[list[dict[str, Any]]] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    compact_summary: str = DEFAULT_SUMMARY
    model: str = "claude-sonnet-4-5"
    # Seconds each streamed response waits between its events (a slow model).
    delay: float = 0.0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: int = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ModelAPI:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": api.usage.cache_read_input_tokens})
                    return
                if not path.endswith("/v1/messages"):
                    self._json(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                blocks, kind = api._answer(body)
                with api._lock:
                    api.requests.append({"path": path, "kind": kind, "body": body})
                if body.get("stream"):
                    self._stream(blocks)
                else:
                    self._json(200, api._message(blocks))

            def _json(self, status: int, value: dict[str, Any]) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, blocks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for name, data in api._events(blocks):
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                    if api.delay:
                        threading.Event().wait(api.delay)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # What the model received -------------------------------------------------------------

    def conversation_requests(self) -> list[dict[str, Any]]:
        """The requests of the conversation itself (those that carried its tools)."""
        return [r["body"] for r in self.requests if r["kind"] == "turn"]

    @staticmethod
    def request_text(body: dict[str, Any]) -> str:
        """Everything a request showed the model, system prompt and messages, as text."""
        parts: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, str):
                parts.append(value)
            elif isinstance(value, list):
                for item in value:
                    walk(item)
            elif isinstance(value, dict):
                for key in ("text", "content"):
                    if key in value:
                        walk(value[key])

        walk(body.get("system"))
        walk(body.get("messages"))
        return "\n".join(parts)

    # Answers --------------------------------------------------------------------------------

    def _answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        # The compaction's request carries the conversation's tools too (2.1.x: so it shares
        # the conversation's prompt cache), with its instruction in the last user message.
        last = body.get("messages", [{}])[-1] if body.get("messages") else {}
        if COMPACT_MARK in self.request_text({"messages": [last]}).lower():
            return [text(self.compact_summary)], "compact"
        if body.get("tools"):
            with self._lock:
                if self.script:
                    return self.script.popleft(), "turn"
            return [text("Done.")], "turn"
        return [text("Noted.")], "other"

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}_{self._ids:024d}"

    def _usage(self) -> dict[str, int]:
        with self._lock:
            usage = {
                "input_tokens": self.usage.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self.usage.cache_read_input_tokens,
                "output_tokens": self.usage.output_tokens,
            }
            self.usage.cache_read_input_tokens += self.usage.step
        return usage

    def _message(self, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        content = [self._with_id(block) for block in blocks]
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        return {
            "id": self._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(),
        }

    def _with_id(self, block: dict[str, Any]) -> dict[str, Any]:
        if block["type"] == "tool_use":
            return {**block, "id": self._next_id("toolu")}
        return block

    def _events(self, blocks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        message = self._message(blocks)
        usage = message["usage"]
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                opening = {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": {},
                }
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                ("content_block_start",
                 {"type": "content_block_start", "index": index, "content_block": opening}),
                ("content_block_delta",
                 {"type": "content_block_delta", "index": index, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
        events += [
            ("message_delta", {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            }),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        return events
