"""The WSGI application the server runs (``signet_site/handlers.py``), driven as granian
drives it: hook posts through ``HOOK_MIDDLEWARE``, every other path through the site's.

The rest of the suite uses Django's test client, which always runs the full ``MIDDLEWARE``.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from checkpoints.models import Session
from signet_site.handlers import HOOK_PATH_PREFIX, HookHandler, SignetApplication, _hook_resolve
from signet_site.wsgi import application
from tests.hookutil import HOOK_URL, payload

pytestmark = pytest.mark.django_db


class Answer:
    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status_code = int(status.split()[0])
        self.headers = {name.lower(): value for name, value in headers}
        self.set_cookies = [v.strip() for name, v in headers if name.lower() == "set-cookie"]
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    method: str,
    path: str,
    body: bytes = b"",
    *,
    token: str = "",
    chunked: bool = False,
    host: str = "127.0.0.1:8000",
) -> Answer:
    """One request through ``application``, with the environ a server would build."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": host,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "" if chunked else str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, headers))
        return lambda data: None

    # As Django's test client does: the test's transaction is not a stale connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        result = application(environ, start_response)
        try:
            content = b"".join(result)
        finally:
            getattr(result, "close", lambda: None)()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    status, headers = started[0]
    return Answer(status, headers, content)


def prompt(session_key: str, text: str = "go on") -> bytes:
    return json.dumps(payload("user_prompt_submit", session_id=session_key, prompt=text)).encode()


def test_the_application_hands_hooks_and_pages_to_their_own_handlers():
    assert isinstance(application, SignetApplication)
    assert type(application.hooks) is HookHandler
    assert HOOK_URL.startswith(HOOK_PATH_PREFIX)
    hook_chain = [type(m).__name__ for m in _middleware_of(application.hooks)]
    site_chain = [type(m).__name__ for m in _middleware_of(application.site)]
    assert hook_chain == [path.rsplit(".", 1)[1] for path in settings.HOOK_MIDDLEWARE]
    assert site_chain == [path.rsplit(".", 1)[1] for path in settings.MIDDLEWARE]


def _middleware_of(handler: Any) -> list[Any]:
    """The middleware instances of a loaded handler, outermost first."""
    found = []
    layer = handler._middleware_chain
    while layer is not None:
        inner = getattr(layer, "__wrapped__", layer)  # convert_exception_to_response's wrapper
        if hasattr(inner, "get_response"):
            found.append(inner)
            layer = inner.get_response
        else:
            layer = None
    return found


def test_a_prompt_through_the_hooks_handler_is_recorded_and_sets_no_cookie(owner, make_token):
    token = make_token(owner, "ingest")
    for number in range(3):
        answer = call("POST", HOOK_URL, prompt("wsgi", f"step {number}"), token=token)
        assert answer.status_code == 200, answer.body
        assert answer.json() == {} or "hookSpecificOutput" in answer.json()
        # Headers the security middleware adds; nothing the browser's would.
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.set_cookies == []
        assert "cookie" not in answer.headers.get("vary", "").lower()
    session = Session.objects.get(owner=owner, session_key="wsgi")
    assert session.prompt_count == 3
    assert session.recent_prompts[-1] == "step 2"


def test_the_hooks_handler_refuses_a_bad_token_and_bad_json_in_the_api_shape(owner, make_token):
    refused = call("POST", HOOK_URL, prompt("nope"), token="sig_not-a-real-token")
    assert refused.status_code == 401
    assert set(refused.json()) >= {"error", "detail"}
    broken = call("POST", HOOK_URL, b"{not json", token=make_token(owner, "ingest"))
    assert broken.status_code == 400
    assert set(broken.json()) >= {"error", "detail"}
    missing = call("POST", HOOK_PATH_PREFIX + "no-such-harness/", prompt("x"), token="t")
    assert missing.status_code in (401, 404)
    assert set(missing.json()) >= {"error", "detail"}
    assert not Session.objects.exists()


def test_the_hooks_handler_refuses_a_host_not_allowed(owner, make_token):
    answer = call("POST", HOOK_URL, prompt("host"), token=make_token(owner), host="evil.example")
    assert answer.status_code == 400
    assert set(answer.json()) >= {"error", "detail"}
    assert not Session.objects.exists()


def test_the_hooks_handler_reads_a_chunked_body_and_refuses_one_over_the_limit(
    owner, make_token, settings
):
    token = make_token(owner, "ingest")
    read = call("POST", HOOK_URL, prompt("chunked"), token=token, chunked=True)
    assert read.status_code == 200, read.body
    assert Session.objects.filter(owner=owner, session_key="chunked").exists()
    anonymous = call("POST", HOOK_URL, prompt("anon"), chunked=True)
    assert anonymous.status_code == 411
    settings.SIGNET_MAX_HOOK_BODY_BYTES = 1_000
    big = json.dumps(payload("user_prompt_submit", session_id="big", prompt="x" * 5_000))
    too_large = call("POST", HOOK_URL, big.encode(), token=token, chunked=True)
    assert too_large.status_code == 413
    assert too_large.json()["error"]
    assert not Session.objects.filter(session_key="big").exists()


def test_pages_keep_the_site_middleware():
    login = call("GET", "/accounts/login/")
    assert login.status_code == 200
    assert login.headers["x-frame-options"] == "DENY"
    assert any(cookie.startswith(settings.CSRF_COOKIE_NAME + "=") for cookie in login.set_cookies)
    # The rest of the API too: only hook posts take the short list.
    schema = call("GET", "/api/sessions/")
    assert schema.status_code == 401
    assert schema.headers["x-frame-options"] == "DENY"


def test_the_hooks_handler_resolves_each_hook_path_once(owner, make_token):
    """Hook paths are matched against the URLconf once, then remembered (a bounded cache);
    each path keeps its own view and arguments. A path that names no harness we have, or is
    long, is resolved each time and never kept: anyone may send one, before any token."""
    _hook_resolve.cache_clear()
    token = make_token(owner, "ingest")
    for number in range(3):
        assert call("POST", HOOK_URL, prompt("cached", f"{number}"), token=token).status_code == 200
    gemini = json.dumps({"session_id": "g1", "hook_event_name": "SessionEnd", "reason": "exit"})
    assert call("POST", "/api/hooks/gemini/", gemini.encode(), token=token).status_code == 200
    for path in (
        HOOK_PATH_PREFIX + "a/b/c/d/",  # no view
        HOOK_PATH_PREFIX + "no-such-harness/",  # a view, which refuses it
        HOOK_PATH_PREFIX + "claude-code/" + "x" * 200 + "/",
    ):
        refused = call("POST", path, prompt("x"), token=token)
        assert refused.status_code == 404, path
        assert set(refused.json()) >= {"error", "detail"}
    info = _hook_resolve.cache_info()
    assert (info.misses, info.hits, info.currsize) == (2, 2, 2)
    assert _hook_resolve(settings.ROOT_URLCONF, "/api/hooks/gemini/").kwargs == {
        "harness": "gemini"
    }
    assert Session.objects.get(owner=owner, session_key="cached").prompt_count == 3
    assert Session.objects.filter(owner=owner, session_key="g1").exists()


def test_a_new_urlconf_empties_the_hook_paths_resolved(settings):
    _hook_resolve(settings.ROOT_URLCONF, HOOK_URL)
    assert _hook_resolve.cache_info().currsize >= 1
    settings.ROOT_URLCONF = "bench.urls"
    assert _hook_resolve.cache_info().currsize == 0


def test_the_hooks_middleware_may_not_see_a_view_before_it_runs(settings):
    """The hook paths' matches are shared by their requests: no middleware may be handed
    their arguments (``process_view``)."""
    settings.HOOK_MIDDLEWARE = [
        *settings.HOOK_MIDDLEWARE,
        "django.middleware.csrf.CsrfViewMiddleware",
    ]
    with pytest.raises(ImproperlyConfigured, match="process_view"):
        HookHandler()
