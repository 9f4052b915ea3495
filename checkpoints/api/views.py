"""API views that belong to no single resource."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.api.schema import errors
from checkpoints.models import ApiToken


class WhoAmIApi(APIView):
    """Who this token belongs to and what it may do: how a client checks its set-up."""

    required_scope = "read"

    @extend_schema(
        responses={
            200: inline_serializer(
                "WhoAmI",
                {
                    "user": serializers.CharField(),
                    "token": inline_serializer(
                        "TokenInfo",
                        {
                            "name": serializers.CharField(),
                            "prefix": serializers.CharField(),
                            "scopes": serializers.ListField(child=serializers.CharField()),
                        },
                    ),
                },
            ),
            **errors(),
        }
    )
    def get(self, request: Request) -> Response:
        token = request.auth
        assert isinstance(token, ApiToken)  # guaranteed by HasTokenScope
        return Response(
            {
                "user": request.user.get_username(),
                "token": {"name": token.name, "prefix": token.prefix, "scopes": token.scopes},
            }
        )
