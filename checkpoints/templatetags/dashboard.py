"""Template filters for the dashboard's pages."""

from __future__ import annotations

from django import template

from checkpoints.models import Scope

register = template.Library()

SCOPE_WORDS = dict(Scope.choices)


@register.filter
def scope_words(scopes: list[str]) -> str:
    """Token scopes as their labels: ``["ingest", "read"]`` → ``Ingest (hooks), Read``."""
    return ", ".join(SCOPE_WORDS.get(scope, scope) for scope in scopes)
