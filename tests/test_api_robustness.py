"""No input answers a 500, and every error under /api/ is JSON ``{"error", "detail"}``."""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client
from django.urls import reverse

from checkpoints.api.errors import API_PREFIX
from checkpoints.api.parsers import MAX_JSON_DEPTH, json_depth
from checkpoints.dashboard.timezone import ViewerTimezoneMiddleware
from checkpoints.models import Checkpoint, Session
from tests.factories import CheckpointFactory, SessionFactory
from tests.hookutil import HOOK_URL, payload
from tests.test_serve import PROJECT_DIR, free_port, service_env


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


# --- Bodies without a Content-Length (issue #10 §3) ------------------------------------


class _CountingInput(io.BytesIO):
    """A server's ``wsgi.input`` that remembers how much was read from it."""

    taken = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


def _post_chunked(client: Any, path: str, body: bytes, *, terminated: bool) -> Any:
    """POST ``body`` as a server hands a chunked request to Django: no CONTENT_LENGTH, and
    with ``terminated`` the server's word that the input ends where the body does."""
    environ: dict[str, Any] = {"wsgi.input": _CountingInput(body), "CONTENT_LENGTH": ""}
    if terminated:
        environ["wsgi.input_terminated"] = True
    return client.generic(
        "POST",
        path,
        body,
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
        **environ,
    )


def test_a_chunked_hook_body_is_read_when_the_server_ends_the_input(client_for, owner):
    body = json.dumps(payload("user_prompt_submit", session_id="chunked")).encode()
    response = _post_chunked(client_for(owner, "ingest"), HOOK_URL, body, terminated=True)
    assert response.status_code == 200, response.content
    assert Session.objects.filter(owner=owner, session_key="chunked").exists()


def test_a_chunked_checkpoint_body_is_read_when_the_server_ends_the_input(client_for, owner):
    body = json.dumps({"session_key": "s", "digest": "chunked"}).encode()
    response = _post_chunked(client_for(owner, "write"), "/api/checkpoints/", body, terminated=True)
    assert response.status_code == 201, response.content
    assert response.json()["digest"] == "chunked"


@pytest.mark.parametrize("authorization", [None, "Bearer sig_not-a-real-token", "Basic eDp5"])
def test_a_chunked_body_is_not_read_without_a_valid_token(client, authorization):
    """Read before the view authenticates, a body that never ends would hold a thread: an
    anonymous sender gets 411 before a byte of it is read."""
    body = json.dumps(payload("user_prompt_submit", session_id="anon")).encode()
    environ = {"wsgi.input": _CountingInput(body), "wsgi.input_terminated": True}
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.generic(
        "POST", HOOK_URL, body, content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="", **environ, **headers,
    )  # fmt: skip
    assert response.status_code == 411
    assert _error_of(response)["error"] == "length_required"
    assert environ["wsgi.input"].taken == 0
    assert not Session.objects.exists()


def test_a_chunked_body_while_the_database_is_away_answers_503_unread(
    client, monkeypatch: pytest.MonkeyPatch
):
    """The token is looked up before the view runs: a database that cannot answer gets the
    API's 503 there too (the hook client keeps the event), not a 500."""

    def database_away(**kwargs: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("checkpoints.api.auth.token_authenticate", database_away)
    body = json.dumps(payload("user_prompt_submit", session_id="away")).encode()
    stream = _CountingInput(body)
    response = client.generic(
        "POST", HOOK_URL, body, content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="",
        HTTP_AUTHORIZATION="Bearer sig_whatever",
        **{"wsgi.input": stream, "wsgi.input_terminated": True},
    )  # fmt: skip
    assert response.status_code == 503
    assert _error_of(response)["error"] == "unavailable"
    assert response["Retry-After"]
    assert stream.taken == 0


@pytest.mark.parametrize("path", [HOOK_URL, "/api/checkpoints/"])
def test_a_chunked_body_over_the_limit_answers_413_unread(client_for, owner, settings, path):
    settings.SIGNET_MAX_BODY_BYTES = settings.SIGNET_MAX_HOOK_BODY_BYTES = 10_000
    body = json.dumps({"session_key": "s", "digest": "x" * 50_000}).encode()
    client = client_for(owner, "ingest", "write")
    environ = {"wsgi.input": _CountingInput(body), "wsgi.input_terminated": True}
    response = client.generic(
        "POST", path, body, content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="", **environ,
    )  # fmt: skip
    assert response.status_code == 413
    assert _error_of(response)["error"] == "too_large"
    assert environ["wsgi.input"].taken == 10_001  # read no further than needed to know
    assert not Checkpoint.objects.exists()


def test_a_chunked_body_at_the_limit_is_read(client_for, owner, settings):
    body = json.dumps({"session_key": "s", "digest": "x"}).encode()
    settings.SIGNET_MAX_BODY_BYTES = len(body)
    response = _post_chunked(client_for(owner, "write"), "/api/checkpoints/", body, terminated=True)
    assert response.status_code == 201


@pytest.mark.parametrize("path", [HOOK_URL, "/api/checkpoints/"])
def test_a_chunked_body_the_server_does_not_end_answers_411(client_for, owner, path):
    body = json.dumps(payload("user_prompt_submit")).encode()
    response = _post_chunked(client_for(owner, "ingest", "write"), path, body, terminated=False)
    assert response.status_code == 411
    assert _error_of(response)["error"] == "length_required"
    assert not Session.objects.exists()


def test_a_body_with_a_length_is_untouched(client_for, owner):
    response = client_for(owner, "write").generic(
        "POST",
        "/api/checkpoints/",
        json.dumps({"session_key": "s", "digest": "plain"}),
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="identity",  # a length given alongside: the length is used
    )
    assert response.status_code == 201


# --- Errors before a view is reached ----------------------------------------------------


def test_the_error_handlers_cover_the_apis_mount_point():
    assert reverse("api:whoami").startswith(API_PREFIX)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/"),
        ("GET", "/api/nope/"),
        ("POST", "/api/nope/"),
        ("DELETE", "/api/checkpoints/a/b/c/d/"),
        ("GET", "/api/hooks/"),
    ],
)
def test_an_unknown_api_url_answers_json_404(client_for, owner, method, path):
    response = client_for(owner, "read").generic(method, path)
    assert response.status_code == 404
    assert _error_of(response)["error"] == "not_found"


def test_an_unknown_api_url_answers_json_404_without_a_token(api_client):
    response = api_client.get("/api/nope/")
    assert response.status_code == 404
    assert _error_of(response)["error"] == "not_found"


def test_other_unknown_urls_keep_the_html_404(client):
    response = client.get("/nope/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_an_api_url_without_its_slash_still_redirects(client_for, owner):
    response = client_for(owner, "read").get("/api/whoami")
    assert response.status_code == 301
    assert response["Location"] == "/api/whoami/"


def test_the_schemas_errors_are_json_too(api_client):
    response = api_client.post("/api/schema/")
    assert response.status_code == 405
    assert _error_of(response)["error"] == "method_not_allowed"
    assert api_client.get("/api/schema/").status_code == 200  # YAML on success, as before


def test_a_request_refused_before_routing_answers_json_400(client_for, owner):
    response = client_for(owner, "read").get("/api/whoami/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert _error_of(response)["error"] == "bad_request"


def test_an_error_outside_the_views_answers_json_500_under_api(monkeypatch):
    def broken(self: Any, request: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(ViewerTimezoneMiddleware, "__call__", broken)
    client = Client(raise_request_exception=False)
    response = client.get("/api/whoami/")
    assert response.status_code == 500
    assert _error_of(response)["error"] == "server_error"
    assert "boom" not in response.content.decode()
    page = client.get("/login/")
    assert page.status_code == 500
    assert page["Content-Type"].startswith("text/html")


# --- The same against a real gunicorn ---------------------------------------------------


@pytest.fixture(scope="module")
def migrated_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A data folder with a migrated SQLite database (and its cache table), and a token."""
    data = tmp_path_factory.mktemp("gunicorn")
    env = service_env(data, 0)
    run = partial(subprocess.run, cwd=PROJECT_DIR, env=env, check=True, timeout=120)
    run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"])
    run([sys.executable, "manage.py", "createcachetable"])
    made = run(
        [sys.executable, "manage.py", "create_token", "--user", "u", "--scopes", "ingest"],
        capture_output=True,
        text=True,
    )
    return data, made.stdout.strip().splitlines()[-1]


def _chunked_request(port: int, path: str, parts: list[bytes], token: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        # An iterable body without a length: http.client sends it chunked, one chunk a part.
        conn.request(
            "POST",
            path,
            body=iter(parts),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "worker",
    [["--worker-class", "sync"], ["--worker-class", "gthread", "--threads", "2"]],
    ids=["sync", "gthread"],
)
def test_gunicorn_reads_a_chunked_body_and_refuses_one_over_the_limit(migrated_data, worker):
    data, token = migrated_data
    port = free_port()
    env = service_env(data, port, SIGNET_MAX_BODY_BYTES="20000", SIGNET_MAX_HOOK_BODY_BYTES="20000")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "signet_site.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", "1", *worker,
        ],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _chunked_request(port, "/api/nope/", [b"{}"], token)
                break
            except OSError:  # not listening yet
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.1)
        body = json.dumps(payload("user_prompt_submit", session_id="chunked")).encode()
        status, reply = _chunked_request(port, HOOK_URL, [body[:40], body[40:]], token)
        assert status == 200, reply
        big = b'{"session_id": "s", "x": "' + b"y" * 30_000 + b'"}'
        status, reply = _chunked_request(port, HOOK_URL, [big[:15_000], big[15_000:]], token)
        assert (status, json.loads(reply)["error"]) == (413, "too_large")
        status, reply = _chunked_request(port, "/api/nope/", [b"{}"], token)
        assert (status, json.loads(reply)["error"]) == (404, "not_found")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
