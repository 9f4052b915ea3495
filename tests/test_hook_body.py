"""A big edit's hook body: taken whole on the hook route (up to its own limit), read once, only
what the adapter reads kept and redacted; bad input is still a JSON 4xx."""

from __future__ import annotations

import io
import json
import tracemalloc
from typing import Any

import pytest
from django.test import RequestFactory
from rest_framework.exceptions import ParseError

from checkpoints.api.hook_body import body_read, payload_load
from checkpoints.api.hooks import HookIngestApi
from checkpoints.harnesses.claude_code import PAYLOAD_SKIPS
from checkpoints.models import Session
from tests.hookutil import HOOK_URL, payload

pytestmark = pytest.mark.django_db

MB = 1024 * 1024
FILE_PATH = "/home/alice/projects/webapp/data/fixtures.sql"
# Besides the body: the pieces a string is checked in, the growth of a buffer read without a
# length, the request and the session's rows.
WORKING_BYTES = 8 * MB


def big_write(size: int, *, secret: str = "") -> bytes:
    """Claude Code's PostToolUse for a Write of a ``size``-byte file: the file in
    ``tool_input.content`` and again in ``tool_response.content``."""
    line = "INSERT INTO invoices VALUES (1, 'VAT \"20%\"', 'caf\u00e9');\n"
    content = (line * (size // len(line) + 1))[:size]
    if secret:
        content = secret + "\n" + content
    body = payload("post_tool_use_write", session_id="big-edit")
    body["tool_input"] = {"file_path": FILE_PATH, "content": content}
    body["tool_response"] = {
        **body["tool_response"],
        "filePath": FILE_PATH,
        "content": content,
        "structuredPatch": [{"lines": ["+" + content[:200]] * 3}],
    }
    return json.dumps(body).encode()


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def post(client: Any, body: bytes) -> Any:
    return client.generic("POST", HOOK_URL, body, content_type="application/json")


def test_a_write_of_a_10_mb_file_lands_among_the_sessions_modified_files(hook):
    body = big_write(10 * MB)
    assert len(body) > 20 * MB
    response = post(hook, body)
    assert response.status_code == 200, response.content[:500]
    assert Session.objects.get(session_key="big-edit").modified_files == [FILE_PATH]


def test_the_other_routes_keep_their_limit(client_for, owner):
    body = json.dumps({"session_key": "s", "digest": "x" * (2 * MB)}).encode()
    client = client_for(owner, "write")
    response = client.generic("POST", "/api/checkpoints/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"


def test_a_body_over_the_hook_limit_is_413_and_says_that_limit(hook, settings):
    settings.SIGNET_MAX_HOOK_BODY_BYTES = 3 * MB
    response = post(hook, big_write(2 * MB))
    assert response.status_code == 413
    assert response.json() == {
        "error": "too_large",
        "detail": f"The body is over {3 * MB} bytes.",
    }
    assert not Session.objects.exists()


def test_a_big_body_is_held_once_while_it_is_read_and_parsed(owner, make_token):
    """The peak of what the view allocates for a 20 MB body: the body once, and a little."""
    body = big_write(10 * MB)
    request = RequestFactory().generic(
        "POST",
        HOOK_URL,
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'ingest')}",
    )
    view = HookIngestApi.as_view()
    tracemalloc.start()
    try:
        response = view(request, harness="claude-code")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 200
    assert peak < len(body) + WORKING_BYTES, f"peak {peak} for a body of {len(body)} bytes"


def test_only_what_is_kept_is_redacted(hook, monkeypatch):
    import checkpoints.services.redaction as redaction

    seen: list[int] = []
    original = redaction.redact

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(text))
        return original(text, *args, **kwargs)

    monkeypatch.setattr(redaction, "redact", counting)
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    response = post(hook, big_write(5 * MB, secret=secret))
    assert response.status_code == 200
    assert sum(seen) < 64 * 1024
    assert secret not in json.dumps(
        Session.objects.values().get(session_key="big-edit"), default=str
    )


TOO_DEEP = b'"structuredPatch": ' + b"[" * 80 + b"]" * 80 + b', "x": ['
SPOILED = {
    "syntax-in-a-skipped-member": (
        lambda body: body.replace(b'"structuredPatch": [', b'"structuredPatch": [,'),
        "invalid_json",
        "not valid JSON",
    ),
    "not-utf8": (
        lambda body: body.replace(b"INSERT", b"INS\xe9RT", 1),
        "invalid_json",
        "not UTF-8",
    ),
    "cut-short": (lambda body: body[:-1], "invalid_json", "not valid JSON"),
    "extra-data": (lambda body: body + b" {}", "invalid_json", "extra data"),
    "too-deep": (
        lambda body: body.replace(b'"structuredPatch": [', TOO_DEEP, 1),
        "invalid_json",
        "nested more than",
    ),
    "bad-field": (
        lambda body: body.replace(b'"session_id": "big-edit"', b'"session_id": 42'),
        "invalid_payload",
        "'session_id' must be a string",
    ),
    "not-an-object": (lambda body: b"[" + body + b"]", "invalid_json", "must be a JSON object"),
}


@pytest.mark.parametrize(("spoil", "code", "reason"), SPOILED.values(), ids=SPOILED.keys())
def test_bad_input_in_a_big_body_is_a_json_4xx(hook, spoil, code, reason):
    response = post(hook, spoil(big_write(2 * MB)))
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == code
    assert reason in response.json()["detail"]
    assert not Session.objects.exists()


def test_a_body_shorter_than_its_content_length_is_400(owner, make_token):
    body = big_write(1000)
    request = RequestFactory().generic(
        "POST",
        HOOK_URL,
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'ingest')}",
    )
    request.META["CONTENT_LENGTH"] = str(len(body) + 10)
    request.META["wsgi.input"] = io.BytesIO(body)
    request._stream = io.BytesIO(body)
    response = HookIngestApi.as_view()(request, harness="claude-code")
    assert response.status_code == 400
    assert json.loads(response.content)["error"] == "invalid_body"


# --- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "tool_input": {"file_path": "/x", "content": "y", "z": [1, {"q": []}, {}]},
         "tool_response": {"a": [1, 2.5e-3, {"b": None}], "c": "\u00e9\n\"\\\u2028"}},
        {"tool_input": "a string", "b": [True, False, None, -1.5e3], "tool_response": "x"},
        {"tool_input": {}, "tool_response": [], "c": {}},
        {"tool_input": {"notebook_path": "/n.ipynb", "new_source": "x"}, "prompt": "\U0001f600"},
        {},
    ],
)  # fmt: skip
def test_a_sparse_parse_is_the_whole_parse_less_what_is_skipped(value):
    text = json.dumps(value, ensure_ascii=False)
    for body in (text.encode(), json.dumps(value, indent=2).encode()):
        expected = dict(value)
        expected.pop("tool_response", None)
        if isinstance(value.get("tool_input"), dict):
            expected["tool_input"] = {
                key: item
                for key, item in value["tool_input"].items()
                if key in (PAYLOAD_SKIPS["tool_input"] or ())
            }
        else:
            expected.pop("tool_input", None)
        assert payload_load(body, skips=PAYLOAD_SKIPS, whole_within=0) == expected
        assert payload_load(body, skips=PAYLOAD_SKIPS, whole_within=len(body)) == value


@pytest.mark.parametrize(
    "body",
    [b'{"a":1,}', b'{"tool_response":[1,]}', b'{"tool_response":{"a" 1}}',
     b'{"tool_response":"\x01"}', b'{"tool_response":{"a":1}', b'{"tool_response":[01]}',
     b'{"tool_response":"\\x"}', b'{"tool_response":tru}', b"", b"{"],
)  # fmt: skip
def test_a_sparse_parse_refuses_what_json_refuses(body):
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    with pytest.raises(ParseError):
        payload_load(body, skips=PAYLOAD_SKIPS, whole_within=0)


@pytest.mark.parametrize("body", [b'{"tool_response": NaN}', b'{"a": [Infinity]}'])
def test_a_sparse_parse_refuses_the_constants_the_api_refuses(body):
    with pytest.raises(ParseError):
        payload_load(body, skips=PAYLOAD_SKIPS, whole_within=len(body))
    with pytest.raises(ParseError):
        payload_load(body, skips=PAYLOAD_SKIPS, whole_within=0)


def test_a_long_string_is_read_in_pieces_whatever_its_escapes():
    """Pieces end where no escape is cut: a string of escapes only, of quotes, of non-ASCII."""
    for text in ("\n" * 700_000, '"' * 600_000, "caf\u00e9\\" * 200_000, "\u00e9" * 400_000):
        value = {"tool_response": {"content": text}, "tool_input": {"file_path": text[:10]}}
        body = json.dumps(value).encode()
        assert payload_load(body, skips=PAYLOAD_SKIPS, whole_within=0) == {
            "tool_input": {"file_path": text[:10]}
        }


def test_body_read_reads_the_declared_length_or_says_it_ended():
    data = b"x" * (3 * MB + 5)
    assert body_read(io.BytesIO(data), len(data)) == data
    assert body_read(io.BytesIO(data), len(data) + 1) is None
    assert body_read(io.BytesIO(b""), 0) == b""


def test_a_big_body_sent_without_a_length_is_read_once_too(hook):
    """Chunked (no Content-Length): the middleware reads it into the one buffer the view
    parses, not a copy of it."""
    body = big_write(5 * MB)
    stream = io.BytesIO(body)
    tracemalloc.start()
    try:
        response = hook.generic(
            "POST", HOOK_URL, b"", content_type="application/json",
            HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="",
            **{"wsgi.input": stream, "wsgi.input_terminated": True},
        )  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 200, response.content[:300]
    assert Session.objects.get(session_key="big-edit").modified_files == [FILE_PATH]
    assert peak < len(body) + WORKING_BYTES, f"peak {peak} for a body of {len(body)} bytes"
