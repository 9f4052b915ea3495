"""``POST /api/hooks/<harness>/``: a harness's raw hook payload in, its native reply out."""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBase, UnreadablePostError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from checkpoints.api.auth import BearerTokenAuthentication, HasTokenScope, bearer_token
from checkpoints.api.errors import error_response, too_large_detail
from checkpoints.api.hook_body import body_of, payload_load
from checkpoints.api.schema import errors
from checkpoints.api.throttles import TokenScopeThrottle
from checkpoints.harnesses import ADAPTERS, adapter_for
from checkpoints.harnesses.base import HarnessAdapter, PayloadError
from checkpoints.services.engine import event_handle

logger = logging.getLogger(__name__)

_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_RENDERER = JSONRenderer()  # a hook's answer is rendered as DRF would render it


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
    """Hook events from a harness (``ingest`` scope). Always fast, never a blocking reply.

    A DRF view for its routes, schema and answers, but a hook post that DRF would admit
    skips DRF's request wrapper and content negotiation: ``dispatch`` authenticates, checks
    the scope and counts the throttle itself, as the three classes named here do, then
    answers. Any other request (no token, a refused token, a missing scope, another method)
    goes through DRF's own ``dispatch``, which refuses it as every API route does.
    """

    required_scope = "ingest"
    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [HasTokenScope]
    throttle_classes = [TokenScopeThrottle]
    parser_classes: list[Any] = []  # the raw body is read and bounded here
    content_negotiation_class = JsonAnswer

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        self.args = args
        self.kwargs = kwargs
        self.headers = self.default_response_headers
        try:
            token = bearer_token(request)
        except Exception as exc:  # answered as DRF answers a view's error (errors.py)
            return self._finalize(request, self.handle_exception(exc))
        if token is None or not token.has_scope(self.required_scope):
            return super().dispatch(request, *args, **kwargs)  # refused there, and counted
        response: HttpResponseBase
        try:
            throttle = TokenScopeThrottle()
            if not throttle.count(scope=self.required_scope, ident=token.pk):
                raise exceptions.Throttled(wait=throttle.wait())
            response = self._ingest(request, owner=token.owner, **kwargs)
        except Exception as exc:
            response = self.handle_exception(exc)
        return self._finalize(request, response)

    @property
    def default_response_headers(self) -> dict[str, str]:
        # DRF works them out per request from the view's methods and renderers, which are
        # the class's: here once (a copy each time, as DRF gives a new dict).
        return dict(_response_headers())

    def _finalize(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        # DRF's last step (its headers; an error's renderer) takes a Django request as well.
        return self.finalize_response(request, response)  # type: ignore[arg-type]

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
        # Reached through DRF's dispatch only when DRF admits a request ``dispatch`` did not:
        # authenticated some other way than a bearer header (a test client's forced
        # authentication), or a token that became valid between the two look-ups.
        assert isinstance(request.user, User)
        return self._ingest(
            request._request, owner=request.user, harness=harness, event_name=event_name
        )

    def _ingest(
        self, request: HttpRequest, *, owner: User, harness: str, event_name: str = ""
    ) -> HttpResponse:
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
        payload_or_error = self._payload(request, adapter)
        if isinstance(payload_or_error, HttpResponse):
            return payload_or_error
        try:
            event = adapter.parse(payload_or_error, event_name=event_name)
        except PayloadError as exc:
            return error_response("invalid_payload", str(exc), status.HTTP_400_BAD_REQUEST)
        key = request.META.get("HTTP_IDEMPOTENCY_KEY", "")  # request.headers builds them all
        if key and not _IDEMPOTENCY_KEY.match(key):
            return error_response(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-100 characters of letters, digits and _.:-",
                status.HTTP_400_BAD_REQUEST,
            )
        outcome = event_handle(owner=owner, event=event, idempotency_key=key)
        return HttpResponse(
            _RENDERER.render(adapter.render(event, outcome)), content_type=_RENDERER.media_type
        )

    def _payload(
        self, request: HttpRequest, adapter: HarnessAdapter
    ) -> dict[str, Any] | HttpResponse:
        """The hook's JSON object, read once (``hook_body``): a big edit's body is kept
        only in what its ``adapter`` reads of it."""
        limit = settings.SIGNET_MAX_HOOK_BODY_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            return error_response("too_large", too_large_detail(limit), 413)
        try:
            # Not ``request.body``: it holds the API's limit, and a second copy of the body.
            body = body_of(request, max(declared, 0))
        except UnreadablePostError:
            body = None
        if body is None:
            return error_response(
                "invalid_body", "The body ended before the length its Content-Length gave.", 400
            )
        if not body or body.isspace():  # (strip would copy it)
            return error_response("invalid_json", "The body is empty; send the hook's JSON.", 400)
        try:
            # The adapter cleans NULs and lone surrogates out: a prompt is never refused.
            payload = payload_load(
                body,
                skips=getattr(adapter, "payload_skips", {}),
                whole_within=settings.SIGNET_MAX_BODY_BYTES,
            )
        except ParseError as exc:
            return error_response("invalid_json", str(exc.detail), 400)
        finally:
            del body
        if not isinstance(payload, dict):
            return error_response(
                "invalid_payload",
                f"The body must be a JSON object, not {type(payload).__name__}.",
                400,
            )
        return payload


@cache
def _response_headers() -> dict[str, str]:
    """The headers DRF gives every answer of the view (``Allow``, from its methods; ``Vary``
    with more than one renderer)."""
    headers: dict[str, str] = APIView.default_response_headers.fget(HookIngestApi())  # type: ignore[attr-defined]
    return headers


@receiver(setting_changed)
def _rest_framework_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "REST_FRAMEWORK":  # the renderers may be others now
        _response_headers.cache_clear()
