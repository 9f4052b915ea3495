"""The service's routes plus the views the hook path is measured against, in the same server.

- A bare Django JSON view: at ``/bench/bare/`` behind the site's middleware (the baseline
  the hook path is judged by), and at ``/api/hooks/bare/`` behind the hooks' shorter list
  (``signet_site/handlers.py``), shown beside it.
- Two floors, behind the hooks' list: what a UserPromptSubmit cannot do without, and nothing
  else. Both take the hook's bearer token and count it in the hook's throttle, as the hook
  does, parse the JSON body with the hook's parser, then write the session the body names
  (one the hook made: it runs first in each round):
  - ``/api/hooks/floor/write/``: one pre-built UPDATE that adds one to its prompt count.
    The least any design that keeps every acknowledged prompt in the database can do.
  - ``/api/hooks/floor/read-write/``: the hook's own read of the session and its
    conditional write-back (``session_read``, ``session_swap``), with one added to the
    prompt count in between: the hook path without the payload's parsing into an event,
    the engine's rules or the harness's answer.

The floors are not routes of the service: only ``bench/settings.py`` serves them.
"""

from collections.abc import Callable
from functools import cache

from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ParseError

from checkpoints.api.auth import bearer_token
from checkpoints.api.parsers import json_load
from checkpoints.api.throttles import TokenScopeThrottle
from checkpoints.models import ApiToken, Session
from checkpoints.services.engine import PROMPT_FIELDS
from checkpoints.services.locks import write_serialized
from checkpoints.services.sessions import session_read, session_swap
from checkpoints.services.statements import Statement, statement_build, statement_run


@csrf_exempt
def bare(request: HttpRequest) -> JsonResponse:
    return JsonResponse({})


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _admitted(request: HttpRequest) -> tuple[ApiToken, str]:
    """What the hook does before its own work: the token, its throttle count, the body's
    JSON. The token and the session key the body names."""
    token = bearer_token(request)
    if token is None or not token.has_scope("ingest"):
        raise Refused(401, "a token with the ingest scope")
    if not TokenScopeThrottle().count(scope="ingest", ident=token.pk):
        raise Refused(429, "throttled")
    try:
        payload = json_load(request.body, storable_only=False)
    except ParseError as exc:
        raise Refused(400, str(exc.detail)) from exc
    session_key = payload.get("session_id") if isinstance(payload, dict) else None
    if not isinstance(session_key, str):
        raise Refused(400, "session_id")
    return token, session_key


@cache
def _count_statement(alias: str) -> Statement:
    quote = connections[alias].ops.quote_name
    count, version = quote("prompt_count"), quote("row_version")
    return statement_build(
        alias=alias,
        sql=(
            f"UPDATE {quote(Session._meta.db_table)} "  # noqa: S608
            f"SET {count} = {count} + 1, {version} = {version} + 1 "
            f"WHERE {quote('owner_id')} = %s AND {quote('session_key')} = %s"
        ),
        returns_rows=False,
    )


def _floor(
    write: Callable[[ApiToken, str], bool | None],
) -> Callable[[HttpRequest], JsonResponse]:
    """A floor's view: the request admitted as the hook admits it (``_admitted``), then
    ``write`` of the token's owner's session the body names: whether it was written, None
    when there is no such session."""

    @csrf_exempt
    def view(request: HttpRequest) -> JsonResponse:
        try:
            token, session_key = _admitted(request)
        except Refused as refused:
            return JsonResponse({"error": str(refused)}, status=refused.status)
        written = write(token, session_key)
        if written is None:
            return JsonResponse({"error": "no such session: the hook makes it"}, status=404)
        return JsonResponse({"written": written})

    return view


@_floor
def floor_write(token: ApiToken, session_key: str) -> bool | None:
    statement = _count_statement("default")
    with write_serialized():  # SQLite's writers take turns, as on the hook path
        result = statement_run(statement=statement, params=[token.owner_id, session_key])
    return True if result.rowcount == 1 else None


@_floor
def floor_read_write(token: ApiToken, session_key: str) -> bool | None:
    read = session_read(owner=token.owner, session_key=session_key, fields=PROMPT_FIELDS)
    if read is None:
        return None
    read.session.prompt_count += 1
    return session_swap(read=read)


urlpatterns = [
    path("bench/bare/", bare),
    # Before the hook routes, which would take "bare" and "floor" for harnesses.
    path("api/hooks/bare/", bare),
    path("api/hooks/floor/write/", floor_write),
    path("api/hooks/floor/read-write/", floor_read_write),
    path("", include("signet_site.urls")),
]
