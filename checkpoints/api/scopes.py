"""Which token scope a view needs: read by the scope permission and by the throttle."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request


def required_scope_for(request: Request, view: Any) -> str | None:
    """The scope ``view`` needs for ``request.method`` (None when it needs none)."""
    by_method: dict[str, str] | None = getattr(view, "required_scopes", None)
    if by_method is not None:
        method = request.method or "GET"
        return by_method.get(method, by_method.get("HEAD" if method == "GET" else method))
    scope: str | None = getattr(view, "required_scope", None)
    return scope
