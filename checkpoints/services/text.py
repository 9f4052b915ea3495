"""Cutting texts to size for what the service shows: one rule everywhere."""

from __future__ import annotations


def shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` chars, cut at a word boundary with an ellipsis if needed."""
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut + "…"
