"""Request bodies sent without a Content-Length (``Transfer-Encoding: chunked``).

Django reads ``CONTENT_LENGTH`` bytes of a body and no more, so a chunked body, which has no
length, reads as empty. A server that de-chunks the body itself and says the input ends
where the body does (``wsgi.input_terminated``, as gunicorn and granian do) lets it be read
to its end: up to the body limit, refused past it. Without that promise a read could wait
for data that never comes, or run into the next request: 411 asks the client for a length.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from checkpoints.api.auth import bearer_token
from checkpoints.api.errors import (
    database_unavailable,
    error_response,
    too_large_detail,
    unavailable_response,
)
from checkpoints.api.hook_body import READ_BODY_KEY
from signet_site.handlers import HOOK_PATH_PREFIX

_READ_STEP = 64 * 1024


def _read_to_end(stream: IO[bytes], limit: int) -> bytearray | None:
    """All of ``stream`` in one buffer (grown in place, not joined from parts: a hook's body
    may be tens of megabytes), or None as soon as it runs past ``limit`` bytes."""
    body = bytearray()
    while True:
        part = stream.read(min(_READ_STEP, limit + 1 - len(body)))
        if not part:
            return body
        body += part
        if len(body) > limit:
            return None


class ChunkedBodyMiddleware:
    """Give a body of unknown length its length, or refuse it (411, 413) in the API's shape."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        if "HTTP_TRANSFER_ENCODING" not in meta or meta.get("CONTENT_LENGTH"):
            return self.get_response(request)
        if not meta.get("wsgi.input_terminated"):
            return error_response(
                "length_required",
                "This server cannot read a body without a length: send Content-Length.",
                411,
            )
        try:
            allowed = bearer_token(request) is not None
        except DatabaseError as exc:
            if not database_unavailable(exc):
                raise
            return unavailable_response()  # as a view answers it, not a 500
        if not allowed:
            # Read before the view authenticates, a body without a length could hold a
            # request thread for as long as its sender likes: only a token holder gets that.
            return error_response(
                "length_required",
                "A body without a length is read only with a valid bearer token: "
                "send Content-Length.",
                411,
            )
        hook = request.path_info.startswith(HOOK_PATH_PREFIX)
        limit = settings.SIGNET_MAX_HOOK_BODY_BYTES if hook else settings.SIGNET_MAX_BODY_BYTES
        body = _read_to_end(meta["wsgi.input"], limit)
        if body is None:
            return error_response("too_large", too_large_detail(limit), 413)
        meta["CONTENT_LENGTH"] = str(len(body))
        if hook:  # the hook view takes this buffer as it is (``hook_body.body_of``)
            meta[READ_BODY_KEY] = body
            return self.get_response(request)
        # What Django reads the body from, and what DRF checks before reading it.
        request._stream = io.BytesIO(body)
        return self.get_response(request)
