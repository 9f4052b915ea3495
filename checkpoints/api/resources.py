"""The REST resources: checkpoints (read, capture, delete), sessions, the recovery preview.

Another owner's data answers 404, exactly like data that does not exist, so a key or an
id can never be probed for. One class per operation, as the style guide keeps them.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.api.schema import errors, paginated
from checkpoints.api.serializers import (
    MAX_PAGE,
    CheckpointCaptureSerializer,
    CheckpointDetailSerializer,
    CheckpointQuerySerializer,
    CheckpointSerializer,
    RecoveryQuerySerializer,
    SessionSerializer,
)
from checkpoints.models import Session
from checkpoints.selectors import (
    CheckpointFilters,
    checkpoint_get,
    checkpoint_latest,
    checkpoint_list,
    checkpoints_of_session,
    session_get,
    session_queryset,
)
from checkpoints.services.config import config_get
from checkpoints.services.recovery import recovery_prepare
from checkpoints.services.store import checkpoints_delete

OpenApiParameterCursor = OpenApiParameter(
    "cursor", OpenApiTypes.STR, description="The `next`/`previous` cursor of a page."
)
OpenApiParameterLimit = OpenApiParameter(
    "limit", OpenApiTypes.INT, description=f"Page size, 1 to {MAX_PAGE}."
)


RecoveryPreviewSerializer = inline_serializer(
    "RecoveryPreview",
    {
        "context": serializers.CharField(),
        "size_chars": serializers.IntegerField(),
        "omitted": serializers.ListField(child=serializers.CharField()),
        "match": serializers.CharField(required=False),
        "checkpoint": inline_serializer(
            "RecoveredCheckpoint",
            {
                "id": serializers.UUIDField(),
                "session_key": serializers.CharField(),
                "trigger": serializers.CharField(),
                "created_at": serializers.DateTimeField(),
            },
            allow_null=True,
        ),
    },
)


class NewestFirst(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 10
    page_size_query_param = "limit"
    max_page_size = MAX_PAGE

    def decode_cursor(self, request: Request) -> Cursor | None:
        """DRF checks a cursor's offset but not its position, which goes into a query as
        is: every ordering here starts with a timestamp, so a position must parse as one."""
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            try:
                parsed = parse_datetime(str(cursor.position))
            except ValueError:
                parsed = None
            if parsed is None:
                raise NotFound(self.invalid_cursor_message)
        return cursor


class OldestFirst(NewestFirst):
    ordering = ("created_at", "id")
    page_size = MAX_PAGE


class RecentlyActive(NewestFirst):
    ordering = ("-last_activity_at", "-id")
    page_size = 20


def _owner(request: Request) -> User:
    assert isinstance(request.user, User)  # token authentication guarantees it
    return request.user


def _paginated(
    request: Request, view: APIView, paginator: CursorPagination, rows: Any, serializer: Any
) -> Response:
    page: list[Any] | None = paginator.paginate_queryset(rows, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)


class KeyedApi(APIView):
    """A view addressed by keys in its path. A key holding NUL names nothing (no PostgreSQL
    text holds one, and its driver refuses to send one), so it answers 404 up front."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if any("\0" in str(value) for value in kwargs.values()):
            raise Http404


class CheckpointListApi(APIView):
    """``GET /api/checkpoints/``: recent checkpoints, filtered, newest first, by cursor.
    ``POST``: capture an explicit or agent checkpoint (``write``), creating the session."""

    required_scopes = {"GET": "read", "HEAD": "read", "POST": "write"}

    @extend_schema(
        operation_id="checkpoint_capture",
        request=CheckpointCaptureSerializer,
        responses={201: CheckpointDetailSerializer, **errors(400, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        data = CheckpointCaptureSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        checkpoint = data.save(owner=_owner(request))
        return Response(CheckpointDetailSerializer(checkpoint).data, status=201)

    @extend_schema(
        operation_id="checkpoint_list",
        parameters=[CheckpointQuerySerializer, OpenApiParameterCursor],
        responses={200: paginated("CheckpointPage", CheckpointSerializer), **errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        query = CheckpointQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = {k: v for k, v in query.validated_data.items() if k != "limit"}
        rows = checkpoint_list(owner=_owner(request), filters=CheckpointFilters(**params))
        return _paginated(request, self, NewestFirst(), rows, CheckpointSerializer)


class SessionCheckpointsApi(KeyedApi):
    """``GET /api/checkpoints/<session_key>/``: a session's checkpoints, oldest first.
    ``DELETE``: delete them all (``write``)."""

    required_scopes = {"GET": "read", "HEAD": "read", "DELETE": "write"}

    @extend_schema(
        operation_id="session_checkpoints_delete",
        responses={
            200: inline_serializer("Deleted", {"deleted": serializers.IntegerField()}),
            **errors(404),
        },
    )
    def delete(self, request: Request, session_key: str) -> Response:
        owner = _owner(request)
        if not Session.objects.filter(owner=owner, session_key=session_key).exists():
            raise Http404
        deleted = checkpoints_delete(owner=owner, session_key=session_key)
        return Response({"deleted": deleted})

    @extend_schema(
        operation_id="session_checkpoints_list",
        parameters=[OpenApiParameterCursor, OpenApiParameterLimit],
        responses={200: paginated("SessionCheckpointPage", CheckpointSerializer), **errors(404)},
    )
    def get(self, request: Request, session_key: str) -> Response:
        owner = _owner(request)
        if not Session.objects.filter(owner=owner, session_key=session_key).exists():
            raise Http404
        rows = checkpoints_of_session(owner=owner, session_key=session_key)
        return _paginated(request, self, OldestFirst(), rows, CheckpointSerializer)


class CheckpointLatestApi(KeyedApi):
    """``GET /api/checkpoints/<session_key>/latest/``: a session's newest checkpoint."""

    required_scope = "read"

    @extend_schema(responses={200: CheckpointDetailSerializer, **errors(404)})
    def get(self, request: Request, session_key: str) -> Response:
        checkpoint = checkpoint_latest(owner=_owner(request), session_key=session_key)
        if checkpoint is None:
            raise Http404
        return Response(CheckpointDetailSerializer(checkpoint).data)


def _checkpoint_id(raw: str) -> str:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise Http404 from None


class CheckpointDetailApi(KeyedApi):
    """``GET /api/checkpoints/<session_key>/<id>/``: one checkpoint in full.
    ``DELETE``: delete it (``write``)."""

    required_scopes = {"GET": "read", "HEAD": "read", "DELETE": "write"}

    @extend_schema(responses={200: CheckpointDetailSerializer, **errors(404)})
    def get(self, request: Request, session_key: str, checkpoint_id: str) -> Response:
        checkpoint = checkpoint_get(
            owner=_owner(request),
            session_key=session_key,
            checkpoint_id=_checkpoint_id(checkpoint_id),
        )
        if checkpoint is None:
            raise Http404
        return Response(CheckpointDetailSerializer(checkpoint).data)

    @extend_schema(operation_id="checkpoint_delete", responses={204: None, **errors(404)})
    def delete(self, request: Request, session_key: str, checkpoint_id: str) -> Response:
        deleted = checkpoints_delete(
            owner=_owner(request),
            session_key=session_key,
            checkpoint_id=_checkpoint_id(checkpoint_id),
        )
        if not deleted:
            raise Http404
        return Response(status=204)


class SessionListApi(APIView):
    """``GET /api/sessions/``: sessions with counts, most recently active first."""

    required_scope = "read"

    @extend_schema(
        parameters=[OpenApiParameterCursor, OpenApiParameterLimit],
        responses={200: paginated("SessionPage", SessionSerializer), **errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        rows = session_queryset(owner=_owner(request))
        return _paginated(request, self, RecentlyActive(), rows, SessionSerializer)


class SessionDetailApi(KeyedApi):
    """``GET /api/sessions/<session_key>/``: one session with counts and lineage."""

    required_scope = "read"

    @extend_schema(responses={200: SessionSerializer, **errors(404)})
    def get(self, request: Request, session_key: str) -> Response:
        session = session_get(owner=_owner(request), session_key=session_key)
        if session is None:
            raise Http404
        return Response(SessionSerializer(session).data)


class RecoveryApi(APIView):
    """``GET /api/recovery/?session=…|project=…``: the context that would be injected now.

    A preview: nothing is recorded as injected.
    """

    required_scope = "read"

    @extend_schema(
        parameters=[RecoveryQuerySerializer],
        responses={200: RecoveryPreviewSerializer, **errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        query = RecoveryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        owner = _owner(request)
        params = query.validated_data
        if params.get("session"):
            found = session_get(owner=owner, session_key=params["session"])
            if found is None:
                raise Http404
            session = found
        else:  # what a new session in this project would get
            session = Session(owner=owner, session_key="", project_normalized=params["project"])
        config, now = config_get(), timezone.now()
        prepared = recovery_prepare(
            owner=owner, session=session, config=config, now=now, budget=params.get("budget")
        )
        if prepared is None:
            return Response({"context": "", "size_chars": 0, "omitted": [], "checkpoint": None})
        match, context = prepared
        checkpoint = match.checkpoint
        return Response(
            {
                "context": context.text,
                "size_chars": len(context.text),
                "omitted": context.omitted,
                "match": match.match,
                "checkpoint": {
                    "id": str(checkpoint.id),
                    "session_key": checkpoint.session_key,
                    "trigger": checkpoint.trigger,
                    "created_at": checkpoint.created_at,
                },
            }
        )
