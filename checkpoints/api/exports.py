"""``GET /api/sessions/<session_key>/export/``: one session as a JSON export document."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from checkpoints.api.resources import KeyedApi
from checkpoints.api.schema import errors
from checkpoints.models import Session
from checkpoints.services.exports import session_export


class SessionExportApi(KeyedApi):
    """The session, its checkpoints and its injections, redacted: what
    ``manage.py import_sessions signet`` reads back. Another owner's session answers 404."""

    required_scope = "read"

    @extend_schema(
        operation_id="session_export", responses={200: OpenApiTypes.OBJECT, **errors(404)}
    )
    def get(self, request: Request, session_key: str) -> Response:
        assert isinstance(request.user, User)  # token authentication guarantees it
        session = (
            Session.objects.filter(owner=request.user, session_key=session_key)
            .select_related("previous_session")
            .first()
        )
        if session is None:
            raise Http404
        return Response(session_export(session=session))
