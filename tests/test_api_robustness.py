"""No input answers a 500, and every error under /api/ is JSON ``{"error", "detail"}``."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from django.db import OperationalError

from checkpoints.api.parsers import MAX_JSON_DEPTH, json_depth
from tests.factories import CheckpointFactory, SessionFactory


def _forged(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


def _error_of(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "detail"}
    assert body["detail"]
    return body


@pytest.mark.parametrize("position", ["garbage", "\0", "2026-13-45 99:99:99"])
@pytest.mark.parametrize("route", ["checkpoints", "sessions", "session-checkpoints"])
def test_a_forged_cursor_position_answers_404(client_for, owner, route, position):
    session = SessionFactory(owner=owner, session_key="forged")
    CheckpointFactory(session=session)
    path = "/api/checkpoints/forged/" if route == "session-checkpoints" else f"/api/{route}/"
    response = client_for(owner, "read").get(path, {"cursor": _forged(f"p={position}")})
    assert response.status_code == 404
    assert _error_of(response)["error"] == "not_found"


def test_a_genuine_cursor_still_pages(client_for, owner):
    session = SessionFactory(owner=owner)
    for _ in range(3):
        CheckpointFactory(session=session)
    client = client_for(owner, "read")
    first = client.get("/api/checkpoints/", {"limit": 2}).json()
    second = client.get(first["next"]).json()
    assert len(first["results"]) == 2
    assert len(second["results"]) == 1


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [500, 2000, 100_000])
def test_state_nested_too_deep_answers_400(client_for, owner, depth):
    # Built as text: json.dumps itself cannot write 2,000 levels.
    state = "[" * depth + "]" * depth
    body = '{"session_key": "s", "digest": "d", "state": ' + state + "}"
    response = client_for(owner, "write").post(
        "/api/checkpoints/", body, content_type="application/json"
    )
    assert response.status_code == 400
    error = _error_of(response)
    assert error["error"] == "parse_error"
    assert "nested" in error["detail"]


def test_a_hook_body_nested_too_deep_answers_400(client_for, owner):
    body = '{"session_id": "s", "x": ' + "[" * 3000 + "]" * 3000 + "}"
    response = client_for(owner, "ingest").post(
        "/api/hooks/claude-code/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert "nested" in _error_of(response)["detail"]


def test_state_at_the_depth_limit_is_accepted(client_for, owner):
    body = {"session_key": "s", "state": {"k": _nested(MAX_JSON_DEPTH - 2)}}
    response = client_for(owner, "write").post("/api/checkpoints/", body, format="json")
    assert response.status_code == 201, response.json()


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth('{"a": "[[[{{{", "b": [1, ["\\"]]]"]]}') == 3
    assert json_depth("[]") == 1
    assert json_depth('"x"') == 0


@pytest.mark.parametrize("text", ["\\ud800", "\\udfff", "a\\ud800b", "\\udc00\\ud800"])
def test_a_lone_surrogate_answers_400(client_for, owner, text):
    body = '{"session_key": "s", "state": {"k": "' + text + '"}}'
    response = client_for(owner, "write").post(
        "/api/checkpoints/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert "surrogate" in _error_of(response)["detail"]


def test_a_surrogate_pair_is_text_and_accepted(client_for, owner):
    body = '{"session_key": "s", "state": {"k": "\\ud83d\\ude00"}}'
    response = client_for(owner, "write").post(
        "/api/checkpoints/", body, content_type="application/json"
    )
    assert response.status_code == 201
    assert response.json()["state"] == {"k": "\N{GRINNING FACE}"}


def test_an_unexpected_error_answers_json_500_and_is_logged(client_for, owner, monkeypatch, caplog):
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("checkpoints.api.resources.session_queryset", broken)
    with caplog.at_level(logging.ERROR, logger="checkpoints.api.errors"):
        response = client_for(owner, "read").get("/api/sessions/")
    assert response.status_code == 500
    assert _error_of(response)["error"] == "server_error"
    assert "boom" not in response.content.decode()
    assert any(record.exc_info and "boom" in str(record.exc_info[1]) for record in caplog.records)


def test_an_unavailable_database_answers_503_with_retry_after(client_for, owner, monkeypatch):
    def unavailable(**kwargs: Any) -> Any:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr("checkpoints.api.resources.session_queryset", unavailable)
    response = client_for(owner, "read").get("/api/sessions/")
    assert response.status_code == 503
    assert _error_of(response)["error"] == "unavailable"
    assert int(response["Retry-After"]) > 0


def test_bad_json_still_answers_400_with_the_reason(client_for, owner):
    response = client_for(owner, "write").post(
        "/api/checkpoints/", '{"session_key": NaN}', content_type="application/json"
    )
    assert response.status_code == 400
    assert _error_of(response)["error"] == "parse_error"
    assert json.dumps(response.json())


@pytest.mark.parametrize(
    "body",
    [
        '{"session_key": "s", "state": {"k": "\\u0000"}}',
        '{"session_key": "s", "state": {"\\u0000": 1}}',
    ],
)
def test_a_nul_in_state_answers_400(client_for, owner, body):
    response = client_for(owner, "write").post(
        "/api/checkpoints/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert "NUL" in _error_of(response)["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/checkpoints/a%00b/",
        "/api/checkpoints/a%00b/latest/",
        "/api/checkpoints/a%00b/00000000-0000-0000-0000-000000000000/",
        "/api/sessions/a%00b/",
    ],
)
def test_a_nul_in_a_path_key_answers_404(client_for, owner, path):
    response = client_for(owner, "read", "write").get(path)
    assert response.status_code == 404
    assert _error_of(response)["error"] == "not_found"
