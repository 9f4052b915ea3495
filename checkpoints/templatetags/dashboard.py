"""Template filters for the dashboard's pages."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from checkpoints.markdown import render_markdown
from checkpoints.models import Scope

register = template.Library()

SCOPE_WORDS = dict(Scope.choices)


@register.filter
def markdown(text: str) -> SafeString:
    """A digest as HTML, its raw HTML escaped."""
    return render_markdown(text)


@register.filter
def scope_words(scopes: list[str]) -> str:
    """Token scopes as their labels: ``["ingest", "read"]`` → ``Ingest (hooks), Read``."""
    return ", ".join(SCOPE_WORDS.get(scope, scope) for scope in scopes)
