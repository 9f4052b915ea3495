"""The parts of a harness's compaction summary that outlive the conversation it replaced.

Claude Code's summary (PostCompact's ``compact_summary``, and the user line it writes into
the transcript) is Markdown-ish prose under numbered headings: ``1. Primary Request and
Intent:``, ``2. Key Technical Concepts:`` … ``7. Pending Tasks:``, ``8. Current Work:``,
``9. Optional Next Step:``, each with text or bullets under it. Read tolerantly: a heading
may be numbered or not, bold, a Markdown heading, with or without its colon, with text after
the colon on its own line; an ``<analysis>`` block is skipped. A summary in no known shape
gives nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checkpoints.services.text import shorten

ITEM_CHARS = 500
REQUEST_CHARS = 2000
MAX_ITEMS = 20

# The sections read, by the heading's words (lower case, spacing collapsed).
REQUEST = "primary request and intent"
PENDING = "pending tasks"
CURRENT = "current work"
NEXT_STEP = "optional next step"
# Every heading Claude Code writes: one of these ends the section before it.
_KNOWN = (
    REQUEST,
    "key technical concepts",
    "files and code sections",
    "errors and fixes",
    "problem solving",
    "all user messages",
    PENDING,
    CURRENT,
    NEXT_STEP,
)
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?P<number>\d{1,2}[.)]\s*)?(?:\*\*|__)?"
    r"(?P<title>[A-Za-z][A-Za-z &/'-]{2,60}?)\s*(?:\*\*|__)?\s*(?::\s*(?:\*\*|__)?|$)"
    r"(?P<rest>.*)$"
)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+")
_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE)
_NOTHING = re.compile(r"^(?:none|n/a|nothing|no (?:pending|explicit|remaining)\b.*)\.?$", re.I)


@dataclass(frozen=True)
class SummaryParts:
    """What a compaction summary says of the session: its request (the goal), the tasks
    still pending, the work in progress and the next step."""

    request: str = ""
    pending: list[str] = field(default_factory=list)
    current: str = ""
    next_step: str = ""

    @property
    def next_steps(self) -> list[str]:
        """The pending tasks, then the next step (when it is not one of them)."""
        steps = list(self.pending)
        if self.next_step and self.next_step not in steps:
            steps.append(self.next_step)
        return steps[:MAX_ITEMS]


def summary_parse(text: str) -> SummaryParts:
    """The request, pending tasks, current work and next step of a compaction summary."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in _ANALYSIS.sub("", text).splitlines():
        heading = _HEADING.match(line)
        title = " ".join(heading["title"].lower().split()) if heading else ""
        if heading and title in _KNOWN:
            current = sections.setdefault(title, [])
            if heading["rest"].strip():
                current.append(heading["rest"].strip())
            continue
        if heading and heading["number"] and not line[:1].isspace() and line.rstrip().endswith(":"):
            # Another numbered heading of the summary's own: it ends the section before it
            # (a numbered item inside a section is indented).
            current = None
            continue
        if current is not None:
            current.append(line)
    return SummaryParts(
        request=_paragraph(sections.get(REQUEST, []), REQUEST_CHARS),
        pending=_items(sections.get(PENDING, [])),
        current=_paragraph(sections.get(CURRENT, []), REQUEST_CHARS),
        next_step=_paragraph(sections.get(NEXT_STEP, []), ITEM_CHARS),
    )


def _paragraph(lines: list[str], limit: int) -> str:
    """The section's lines as one line of text, bullets joined with '; '."""
    parts = [" ".join(_BULLET.sub("", line).split()) for line in lines]
    text = "; ".join(part for part in parts if part)
    if _NOTHING.match(text):
        return ""
    return shorten(text, limit)


def _items(lines: list[str]) -> list[str]:
    """The section's bullets, each one item (a bullet's continuation lines joined to it);
    prose with no bullets is one item."""
    items: list[list[str]] = []
    for line in lines:
        if not line.strip():
            continue
        if _BULLET.match(line) or not items:
            items.append([_BULLET.sub("", line).strip()])
        else:
            items[-1].append(line.strip())
    texts = [" ".join(" ".join(item).split()) for item in items]
    return [shorten(text, ITEM_CHARS) for text in texts if text and not _NOTHING.match(text)][
        :MAX_ITEMS
    ]
