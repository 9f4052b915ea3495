"""``POST /api/hooks/<harness>/``: a harness's raw hook payload in, its native reply out."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from django.http.request import RawPostDataException
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.api.errors import error_response, too_large_detail
from checkpoints.api.parsers import json_load
from checkpoints.api.schema import errors
from checkpoints.harnesses import ADAPTERS, adapter_for
from checkpoints.harnesses.base import PayloadError
from checkpoints.services.engine import event_handle

logger = logging.getLogger(__name__)

_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


class JsonAnswer(BaseContentNegotiation):
    """A hook is answered in JSON whatever its ``Accept`` header says: nothing to negotiate
    (the view reads its body itself, so no parser either)."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return None

    def select_renderer(
        self, request: Request, renderers: Any, format_suffix: str | None = None
    ) -> tuple[Any, str]:
        renderer = renderers[0]
        return renderer, renderer.media_type


class HookIngestApi(APIView):
    """Hook events from a harness (``ingest`` scope). Always fast, never a blocking reply."""

    required_scope = "ingest"
    parser_classes: list[Any] = []  # the raw body is read and bounded here
    content_negotiation_class = JsonAnswer

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "harness", OpenApiTypes.STR, OpenApiParameter.PATH, enum=sorted(ADAPTERS)
            )
        ],
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 404, 413)},
        description="The harness's raw hook payload; the reply is its native hook output.",
    )
    def post(self, request: Request, harness: str, event_name: str = "") -> HttpResponse:
        adapter = adapter_for(harness)
        if adapter is None:
            return error_response("unknown_harness", f"No adapter for harness '{harness}'.", 404)
        if bool(event_name) != adapter.event_in_path:
            where = (
                f"/api/hooks/{harness}/<event>/"
                if adapter.event_in_path
                else f"/api/hooks/{harness}/"
            )
            return error_response("wrong_route", f"Hooks of '{harness}' post to {where}.", 404)
        payload_or_error = self._payload(request)
        if isinstance(payload_or_error, HttpResponse):
            return payload_or_error
        try:
            event = adapter.parse(payload_or_error, event_name=event_name)
        except PayloadError as exc:
            return error_response("invalid_payload", str(exc), status.HTTP_400_BAD_REQUEST)
        key = request.headers.get("Idempotency-Key", "")
        if key and not _IDEMPOTENCY_KEY.match(key):
            return error_response(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-100 characters of letters, digits and _.:-",
                status.HTTP_400_BAD_REQUEST,
            )
        assert isinstance(request.user, User)  # a token authenticated this request
        outcome = event_handle(owner=request.user, event=event, idempotency_key=key)
        return Response(adapter.render(event, outcome))

    def _payload(self, request: Request) -> dict[str, Any] | HttpResponse:
        limit = settings.SIGNET_MAX_BODY_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            return error_response("too_large", too_large_detail(), 413)
        try:
            body = request.body
        except RawPostDataException:
            return error_response("invalid_body", "The body was already read.", 400)
        except RequestDataTooBig:  # past Django's own limit, whatever the header said
            return error_response("too_large", too_large_detail(), 413)
        if len(body) > limit:
            return error_response("too_large", too_large_detail(), 413)
        if not body.strip():
            return error_response("invalid_json", "The body is empty; send the hook's JSON.", 400)
        try:
            # The adapter cleans NULs and lone surrogates out: a prompt is never refused.
            payload = json_load(body, storable_only=False)
        except ParseError as exc:
            return error_response("invalid_json", str(exc.detail), 400)
        if not isinstance(payload, dict):
            return error_response(
                "invalid_payload",
                f"The body must be a JSON object, not {type(payload).__name__}.",
                400,
            )
        return payload
