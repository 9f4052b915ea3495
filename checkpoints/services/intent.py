"""What a user's prompt says about the session beyond its words: whether it redirects the
session to other work, and which rules or choices it lays down (decisions). Plain text
rules, no model: conservative, so that what they keep is what the user said. Whether a
prompt can state a goal at all is ``goal_worthy``'s rule (``hooks/transcripts/prompts.py``,
which the hook client applies to the transcript's prompts too); the harness's own notices
are gone from a prompt by the time it gets here (its adapter's ``typed_prompt``).

- **A redirect**: a prompt that opens by saying the work changes: "new task:", "new goal:",
  "change of plans", "instead, …" (not "instead, use …", a choice), "forget
  that/this/it/everything, …", "scratch that, …", "let's switch to …", "let's move on to …",
  "now let's work on …", "let's work on something else: …" (after an optional "ok", "okay",
  "alright", "actually"). Only what follows the opening counts, and it must be worth a goal
  itself: "forget that" alone redirects nothing.
- **A decision**: a sentence (not a question) that states a rule or a choice: "use X, not
  Y", "use X instead of Y", one that opens with "don't", "do not", "never", "always",
  "prefer", "decision:" (optionally after "please", "and", "but", "also", "so", "we",
  "you"; "I prefer …" too), "please use …", a choice ("let's go with …", "go with
  option 2", "I'd go with …"), or one that says "must" (not "must be the …", "must have …":
  a guess). Code (fenced, or indented lines) is not read. Each is kept as its sentence, at
  most ``DECISION_CHARS`` characters.
"""

from __future__ import annotations

import re

from checkpoints.services.text import shorten
from hooks.transcripts.prompts import goal_worthy

DECISION_CHARS = 300
MAX_DECISIONS = 20
# What of a prompt is read for decisions: a pasted log further down states none.
DECISION_SCAN_CHARS = 4000
REDIRECT_SCAN_CHARS = 300  # a redirect says so in its first words


_LEAD = r"(?:(?:ok(?:ay)?|alright|actually|so|right|hmm|well)[,.!]?\s+)*"
_REDIRECT = re.compile(
    _LEAD + r"(?:"
    r"new (?:task|goal|plan)\b|change of plans?\b|different task\b|"
    r"instead\b(?![\s,:]+use\b)|"
    r"forget (?:about )?(?:that|this|it|everything|all that)\b|scratch that\b|"
    r"let'?s (?:now )?(?:switch|move on|pivot|turn) to\b|let us (?:switch|move on) to\b|"
    r"(?:now|next),? let'?s (?:work on|focus on|switch to|move on to|turn to)\b|"
    r"let'?s (?:work on|do) something else\b"
    r")[\s:,.;!-]*",
    re.IGNORECASE,
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_RULE_OPENING = re.compile(
    r"(?:(?:please|and|but|also|so|then|ok(?:ay)?|note)[,:]?\s+)*(?:"
    r"(?:(?:we|you)\s+(?:should\s+|must\s+)?)?(?:don'?t|do not|never|always)\b"
    r"|prefer\b|decision\s*:|(?:i|we)(?:'d|\s+would)?\s+prefer\b"
    r"|please\s+(?:always\s+)?use\b"  # a style or tool the user asks for: "please use uv"
    r"|(?:(?:let'?s|we'?ll|i'?ll|i'?d|we'?d|we\s+should|just)\s+)?go\s+with\b"  # a choice
    r")",
    re.IGNORECASE,
)
# A word every kind of decision holds: a prompt (or a line, a sentence) without one has none.
_TRIGGER_WORDS = (
    "use",
    "don",
    "do not",
    "never",
    "always",
    "must",
    "prefer",
    "decision",
    "go with",
)
_TRIGGER = re.compile(
    r"\b(?:use|don'?t|do not|never|always|must(?:n'?t)?|prefer|decision|go with)\b",
    re.IGNORECASE,
)
_USE_NOT = re.compile(r"\buse\b.+?,\s*not\b(?!\s+sure)|\buse\b.+?\binstead of\b", re.IGNORECASE)
# Not a guess ("it must be the cache", "I must have missed it").
_MUST = re.compile(
    r"\bmust(?:n'?t)?\b(?!\s+(?:have|'ve|be\s+(?:a|an|the|because|something|why|that)\b))",
    re.IGNORECASE,
)


def redirect_of(prompt: str) -> bool:
    """Whether ``prompt`` redirects the session to other work, with substance of its own
    after the words that say so."""
    text = prompt[:REDIRECT_SCAN_CHARS].strip()
    match = _REDIRECT.match(text)
    return match is not None and goal_worthy(text[match.end() :])


def decisions_in(prompt: str) -> list[str]:
    """The sentences of ``prompt`` that state a rule or a choice, in order, each at most
    ``DECISION_CHARS`` characters."""
    head = prompt[:DECISION_SCAN_CHARS]
    lowered = head.lower()
    if not any(word in lowered for word in _TRIGGER_WORDS):
        return []  # most prompts: a few substring searches
    text = head.strip()
    found: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")):
            continue
        if not _TRIGGER.search(line):
            continue
        for part in _SENTENCE_END.split(line):
            sentence = " ".join(_BULLET.sub("", part).split())
            if (
                not sentence
                or sentence.endswith("?")
                or not _TRIGGER.search(sentence)
                or not goal_worthy(sentence)
            ):
                continue
            if _RULE_OPENING.match(sentence) or _USE_NOT.search(sentence) or _MUST.search(sentence):
                found.append(shorten(sentence, DECISION_CHARS))
    return found


def decisions_add(decisions: list[str], new: list[str]) -> list[str]:
    """``decisions`` with ``new`` added, newest last: one stated again moves to the end
    (compared without case or spacing), at most ``MAX_DECISIONS``."""
    kept = list(decisions)
    for item in new:
        key = _key(item)
        kept = [old for old in kept if _key(old) != key]
        kept.append(item)
    return kept[-MAX_DECISIONS:]


def _key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".!")
