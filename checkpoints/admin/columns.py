"""The admin's shared pieces: shortened list columns, lists as HTML, and the read-only base."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from checkpoints.models import (
    Session,
)

ModelT = TypeVar("ModelT", bound=Model)
Column = Callable[[Any, Any], str]

# List columns keep this many characters of a session key, an owner's name and a project.
KEY_CHARS = 10
OWNER_CHARS = 12
PROJECT_CHARS = 24


def shortened(value: str, *, limit: int, keep_end: bool = False) -> str:
    """``value`` cut to ``limit`` characters for a list column, whole in its title attribute.

    ``keep_end`` keeps the end of the value (a path's last segments) instead of its start.
    """
    if len(value) <= limit:
        return value or "-"
    if keep_end:
        tail = value[-(limit - 1) :]
        # A path keeps its last whole segments: "…/services/checkout-api".
        short = "…" + tail[max(tail.find("/"), 0) :]
    else:
        short = value[: limit - 1] + "…"
    return format_html('<span title="{}">{}</span>', value, short)


def moment_text(value: Any) -> str:
    """A list column's time, short enough to fit: ``2025-06-01 14:05`` in the current zone.

    The line may break between the day and the time, never inside the day.
    """
    if not value:
        return "-"
    local = timezone.localtime(value)
    return format_html('<span class="nowrap">{}</span> {}', f"{local:%Y-%m-%d}", f"{local:%H:%M}")


def html_list(items: Any) -> str:
    """A JSON list as an HTML list, each item escaped; an empty or absent list as a dash."""
    if not items:
        return "-"
    if not isinstance(items, list):
        items = [items]
    return format_html(
        '<ul class="signet-list">{}</ul>',
        format_html_join(
            "",
            "<li>{}</li>",
            ((item if isinstance(item, str) else json.dumps(item),) for item in items),
        ),
    )


def session_rows_link(*, model: str, session: Session, count: int) -> str:
    """A link to the ``model`` list filtered to ``session``: "3 checkpoints"."""
    url = reverse(f"admin:checkpoints_{model}_changelist") + f"?session__id__exact={session.pk}"
    return format_html('<a href="{}">{} {}{}</a>', url, count, model, "" if count == 1 else "s")


def value_at(obj: Any, path: str) -> Any:
    for name in path.split("__"):
        obj = getattr(obj, name)
    return obj


def short_column(path: str, description: str, *, limit: int, keep_end: bool = False) -> Column:
    """A list column of the text at ``path`` (``session__session_key``), shortened."""

    @admin.display(description=description, ordering=path)
    def column(model_admin: Any, obj: Any) -> str:
        return shortened(value_at(obj, path), limit=limit, keep_end=keep_end)

    return column


def time_column(path: str, description: str) -> Column:
    """A list column of the time at ``path``, short enough to fit."""

    @admin.display(description=description, ordering=path)
    def column(model_admin: Any, obj: Any) -> str:
        return moment_text(value_at(obj, path))

    return column


def list_column(path: str, description: str) -> Column:
    """A read-only field showing the JSON list at ``path`` as an HTML list."""

    @admin.display(description=description)
    def column(model_admin: Any, obj: Any) -> str:
        return html_list(value_at(obj, path))

    return column


class ReadOnlyAdmin(admin.ModelAdmin[ModelT]):
    """Rows the engine owns: viewed, and deleted where permitted, but never added or saved.

    Without the change permission Django shows a view page with no Save buttons, and refuses
    a POST to it: a form saving what it read at page load would overwrite counts the engine
    updated meanwhile.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
