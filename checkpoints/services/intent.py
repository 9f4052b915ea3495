"""What a user's prompt says about the session beyond its words: whether it states a task
(the session's goal), redirects the session to another one, or lays down a rule or a choice
(a decision). Plain text rules, no model: conservative, so that what they keep is what the
user said.

- **Substantive**: a prompt that asks for something. Not a harness wrapper (a line that
  opens with ``<task-notification>``, ``<system-reminder>`` …), not a note the harness
  marks (``# …``, ``/remember …``: the caller knows), and not a prompt whose every word is
  a greeting, an acknowledgement or a go-ahead ("hi", "ok", "yes", "continue", "go on",
  "thanks, do it").
- **A redirect**: a substantive prompt that opens by saying the work changes: "new task:",
  "new goal:", "change of plans", "instead, …", "forget that/this/it/everything, …",
  "scratch that, …", "let's switch to …", "let's move on to …", "now let's work on …",
  "let's work on something else: …" (after an optional "ok", "okay", "alright", "actually").
  Only what follows the opening counts as its substance: "forget that" alone redirects
  nothing.
- **A decision**: a sentence (not a question) that states a rule or a choice: "use X, not
  Y", "use X instead of Y", one that opens with "don't", "do not", "never", "always",
  "prefer", "decision:" (optionally after "please", "and", "but", "also", "so", "we",
  "you"), or one that says "must". Code (fenced, or indented lines) is not read. Each is
  kept as its sentence, at most ``DECISION_CHARS`` characters.
"""

from __future__ import annotations

import re

DECISION_CHARS = 300
MAX_DECISIONS = 20
# What of a prompt is read for decisions: a pasted log further down states none.
DECISION_SCAN_CHARS = 4000
REDIRECT_SCAN_CHARS = 300  # a redirect says so in its first words

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[[0-9;]{1,12}m")
_WRAPPERS = (
    "<task-notification>",
    "<system-reminder>",
    "<ide_opened_file>",
    "<ide_selection>",
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<user-prompt-submit-hook>",
)
_ACK_TEXT = """
    hi hello hey hiya yo morning evening afternoon good there all
    ok okay k kk sure yes yeah yep yup y no nope fine alright right great cool nice perfect
    awesome excellent thanks thank you thx ty cheers lgtm agreed approve approved sounds
    continue go on ahead proceed carry keep going resume retry try again next done do it
    that this please pls now then and so let's lets us
"""
_ACK_WORDS = frozenset(_ACK_TEXT.split())
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")

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
    r")",
    re.IGNORECASE,
)
# A word every kind of decision holds: a prompt (or a line, a sentence) without one has none.
_TRIGGER_WORDS = ("use", "don", "do not", "never", "always", "must", "prefer", "decision")
_TRIGGER = re.compile(
    r"\b(?:use|don'?t|do not|never|always|must(?:n'?t)?|prefer|decision)\b", re.IGNORECASE
)
_USE_NOT = re.compile(r"\buse\b.+?,\s*not\b(?!\s+sure)|\buse\b.+?\binstead of\b", re.IGNORECASE)
# Not a guess ("it must be the cache", "I must have missed it").
_MUST = re.compile(
    r"\bmust(?:n'?t)?\b(?!\s+(?:have|'ve|be\s+(?:a|an|the|because|something|why|that)\b))",
    re.IGNORECASE,
)


def plain(text: str) -> str:
    """``text`` without terminal colour codes, stripped."""
    return _ANSI.sub("", text).strip()


def is_wrapper(prompt: str) -> bool:
    """Whether ``prompt`` is a harness's wrapper (a background task's notice, an opened file,
    a reminder, a slash command's echo), not something the user typed."""
    return plain(prompt).lower().startswith(_WRAPPERS)


def is_substantive(prompt: str) -> bool:
    """Whether ``prompt`` asks for something (see the module's rules); a note is the caller's
    to leave out."""
    text = plain(prompt)
    if not text or is_wrapper(text):
        return False
    return any(word.group().lower() not in _ACK_WORDS for word in _WORD.finditer(text))


def redirect_of(prompt: str) -> bool:
    """Whether ``prompt`` redirects the session to other work, with substance of its own
    after the words that say so."""
    text = plain(prompt[:REDIRECT_SCAN_CHARS])
    match = _REDIRECT.match(text)
    return match is not None and is_substantive(text[match.end() :])


def decisions_in(prompt: str) -> list[str]:
    """The sentences of ``prompt`` that state a rule or a choice, in order, each at most
    ``DECISION_CHARS`` characters; none in a wrapper."""
    head = prompt[:DECISION_SCAN_CHARS]
    lowered = head.lower()
    if not any(word in lowered for word in _TRIGGER_WORDS):
        return []  # most prompts: a few substring searches
    text = plain(head)
    if not text or is_wrapper(text):
        return []
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
                or not is_substantive(sentence)
            ):
                continue
            if _RULE_OPENING.match(sentence) or _USE_NOT.search(sentence) or _MUST.search(sentence):
                found.append(_clip(sentence, DECISION_CHARS))
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


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut + "…"
