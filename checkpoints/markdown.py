"""Markdown for digests, as the dashboard and the admin show them.

Digests are written by agents and by clients: they are untrusted text. Raw HTML in them is
shown as text (CommonMark with HTML off), links keep only http, https and mailto targets
(with ``rel="nofollow noopener noreferrer"``), and images are not rendered.
"""

from __future__ import annotations

from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

SAFE_LINK_SCHEMES = ("http:", "https:", "mailto:")


def _link_allowed(url: str) -> bool:
    lowered = url.strip().lower()
    if ":" not in lowered.split("/", 1)[0]:
        return True  # relative link or anchor
    return lowered.startswith(SAFE_LINK_SCHEMES)


_renderer = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_renderer.validateLink = _link_allowed  # type: ignore[method-assign]
# An image in a digest would make every viewer's browser fetch a URL an agent wrote.
_renderer.disable("image")


def _link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
    rendered: str = self.renderToken(tokens, idx, options, env)
    return rendered


_renderer.add_render_rule("link_open", _link_open)


def render_markdown(text: str) -> SafeString:
    """``text`` rendered as CommonMark, its raw HTML escaped and unsafe link targets dropped."""
    html: str = _renderer.render(text or "")
    return mark_safe(html)  # noqa: S308 (html is off: the output is escaped)
