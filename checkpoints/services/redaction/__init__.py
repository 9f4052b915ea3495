"""Secret redaction for everything that leaves the server: digests, recovery context, replies.

The patterns are written from the token formats vendors document (prefixes, lengths,
charsets), plus the generic shapes secrets take in transcripts: ``KEY=value`` and
``"key": "value"`` pairs under secret-ish names, ``Authorization`` headers, credentials in
URLs and on command lines (``curl -u``, ``docker login -p``, ``mysql -pX``, ``sshpass -p``,
``.netrc``), PEM private keys, and prose ("the password for the prod db is ...").

Two properties matter more than recall on exotic formats:

* Precision on what agents write all day: git SHAs, UUIDs, digests, paths, URLs, code that
  *refers* to a secret (``os.environ["TOKEN"]``, ``password: str``) are left alone.
* Bounded cost: every rule starts on a literal or keyword, every quantifier is bounded and
  possessive, and a rule only runs when one of its hint substrings occurs, so a 2 KB text
  costs a fraction of a millisecond and a 1 MiB text stays linear.

Where the grammar says little, the value has to look like a secret by itself. The "is"
forms ("the password for the prod db is X", "pw is X", "credentials are user:X") say
enough to keep the older test: 6 characters or more, not a plain word (one hyphen allowed:
"auto-generated"), a placeholder or a reference. The looser shapes ask more:

* A keyword, whitespace, the value (``with secret X``, ``and password X to``,
  ``SecretAccessKey X,``): after a password, passphrase, secret or token keyword, the
  value has 8 characters or more and three of lowercase, uppercase, digit and symbol
  (``Tr0ub4dor&3``, ``Welcome2024!``) without reading as a name built of words and
  numbers (``OAuth2Session``, ``AES-256-GCM``), or is encoded: lowercase hex of 32 digits
  or more, base64 of 20 characters or more that mixes letters and digits. After ``key``
  and ``webhook`` (dict keys, keyboard keys) only an encoded value counts, and not after a
  data-ish word (``cache key``, ``primary key``, ``public key``); after ``api key``,
  ``signing key`` and the like the rule for secret keywords applies. Placeholders, paths,
  URLs, flags, references (``*oauth2.Token``) and ``NAME=value`` never count.
* ``user / password`` needs an account name (``admin``, ``root``, an e-mail) or a login
  word earlier on the line, and a value as above.
* A ``0x``-prefixed 64-hex value is a private key unless a hash word comes before it on its
  line (``tx``, ``blockHash``, ``slot``) or it reads as a constant (capitals, ``FFFFFF``).
  In these rules hex in capitals is a GPG fingerprint or a constant, not a secret.

Run over about 16 million lines of ordinary text (the Python standard library and the
packages this project installs, the Rust books, Debian changelogs), these rules changed no
line the earlier ones left alone except ``.netrc`` lines (a test suite's fixtures, a
changelog's example). The corpus in ``tests/redaction_corpus.py`` holds both sides.

The package: ``values`` (what a value says on its own), ``extractors`` (from a match to the
span to blank out), ``rules`` (the patterns, as one table); here, the scan and the API.
Standard library only, no Django: scripts and the benchmark import it directly.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from typing import Any, NamedTuple

from checkpoints.services.redaction.rules import KEY, RULES, Rule
from checkpoints.services.redaction.values import REDACTED, is_placeholder

__all__ = [
    "REDACTED",
    "Finding",
    "contains_secret",
    "find_secrets",
    "redact",
    "redact_clip",
    "redact_data",
]


class Finding(NamedTuple):
    """A secret's span in a text, and the kind of rule that found it."""

    start: int
    end: int
    kind: str


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _spans(rule: Rule, text: str, lowered: str) -> Iterator[tuple[int, int]]:
    if not rule.anchors:
        for match in rule.pattern.finditer(text):
            if span := rule.extract(match):
                yield span
        return
    if rule.to_line_end:
        yield from _line_spans(rule, text, lowered)
        return
    hits: list[int] = []
    for word in rule.anchors:
        at = lowered.find(word)
        while at >= 0:
            hits.append(at)
            at = lowered.find(word, at + 1)
    resume = 0
    for at in sorted(hits):
        if at < resume or not (found := rule.pattern.match(text, at)):
            continue
        # A rejected match (a placeholder, a template) may still hold a secret further in,
        # as in "{\"user\": \"bob\", \"password\": \"...\"}", so only an accepted one is skipped.
        if span := rule.extract(found):
            resume = found.end()
            yield span


def _first_anchor(lowered: str, anchors: tuple[str, ...], start: int) -> int:
    found = [at for at in (lowered.find(word, start) for word in anchors) if at >= 0]
    return min(found, default=-1)


def _line_spans(rule: Rule, text: str, lowered: str) -> Iterator[tuple[int, int]]:
    at = _first_anchor(lowered, rule.anchors, 0)
    while at >= 0:
        end = text.find("\n", at)
        while end > 0 and text[end - 1] == "\\":  # a backslash continues the line
            end = text.find("\n", end + 1)
        end = len(text) if end < 0 else end
        for match in rule.pattern.finditer(text, at, end):
            if span := rule.extract(match):
                yield span
        at = _first_anchor(lowered, rule.anchors, end)


# Each distinct hint once, with the rules (by position in ``RULES``) it lets run: a text is
# searched for each hint once, not once per rule that names it.
_RULES_BY_HINT: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
    (hint, tuple(index for index, rule in enumerate(RULES) if hint in rule.hints))
    for hint in sorted({hint for rule in RULES for hint in rule.hints})
)


def _iter_findings(text: str) -> Iterator[Finding]:
    if not text:  # most of an event's fields: nothing to look for, not even the hints
        return
    # ASCII only: str.lower() can change the length (a dotted capital I becomes two code
    # points), and offsets in the lowered copy must be the text's.
    lowered = text.translate(_ASCII_LOWER)
    hinted = {index for hint, indexes in _RULES_BY_HINT if hint in lowered for index in indexes}
    for index in sorted(hinted):
        rule = RULES[index]
        for start, end in _spans(rule, text, lowered):
            # Already redacted (a PEM body, say): finding it again would make no change.
            if end > start and text[start:end] != REDACTED:
                yield Finding(start, end, rule.kind)


# --- Public API -----------------------------------------------------------------------------


def find_secrets(text: str) -> list[Finding]:
    """Every secret found in ``text``, by start offset; spans of different rules may overlap."""
    return sorted(_iter_findings(text))


def contains_secret(text: str) -> bool:
    """Whether ``redact`` would change ``text``."""
    return next(_iter_findings(text), None) is not None


def redact(text: str) -> str:
    """Replace every secret in ``text`` with ``REDACTED``; keep everything around it.

    Overlapping or touching findings merge into one ``REDACTED``. For ``key=value`` forms,
    headers and URLs only the value goes, so the reader still sees what was there. The
    result is stable: ``redact(redact(text)) == redact(text)``.
    """
    findings = find_secrets(text)
    if not findings:
        return text
    parts: list[str] = []
    position = 0
    merged_start, merged_end = findings[0].start, findings[0].end
    for finding in findings[1:]:
        if finding.start <= merged_end:
            merged_end = max(merged_end, finding.end)
            continue
        parts += (text[position:merged_start], REDACTED)
        position = merged_end
        merged_start, merged_end = finding.start, finding.end
    parts += (text[position:merged_start], REDACTED, text[merged_end:])
    return "".join(parts)


_SECRET_KEY_MAX = 100  # longer dict keys are data, not field names
_SECRET_KEY_RE = re.compile(
    r"(?:.*[^a-z0-9])?(?:authorization|cookie)$|.*" + KEY + r"$",
    re.VERBOSE | re.IGNORECASE,
)


def redact_clip(text: str, limit: int) -> str:
    """Redact, then cut to ``limit`` characters.

    Cutting first could leave the head of a secret that no pattern recognises any more;
    redacting a whole megabyte to keep 500 characters would be waste. So the text is cut
    generously first, redacted, and then cut to size.
    """
    return redact(text[: limit * 4 + 256])[:limit]


def redact_data(value: Any) -> Any:
    """Redact every string inside dicts, lists, tuples and sets; return new containers.

    Dict keys are kept. A non-empty, non-placeholder string under a secret-ish key
    (``password``, ``api_key``, ``GITHUB_TOKEN``, ``authorization`` ...) is replaced whole;
    other strings go through ``redact``. Other scalars (numbers, None, bools) are untouched.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(key, str)
            and isinstance(item, str)
            and len(key) <= _SECRET_KEY_MAX
            and _SECRET_KEY_RE.fullmatch(key)
            and not is_placeholder(item)
            else redact_data(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_data(item) for item in value)
    if isinstance(value, set | frozenset):
        return type(value)(redact_data(item) for item in value)
    return value
