"""From a rule's match to the span to blank out, or None when the value is no secret."""

from __future__ import annotations

import re
from collections.abc import Callable

from checkpoints.services.redaction.values import (
    INNER_CAPITAL_RE,
    PLACEHOLDER_RE,
    REDACTED,
    is_encoded,
    is_name,
    is_placeholder,
    is_plain_word,
    is_reference,
    looks_secret,
    trim_bare,
)

Extract = Callable[[re.Match[str]], tuple[int, int] | None]

_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


# --- Where the format or the grammar says a secret follows ----------------------------------


def vendor_token(*, mixed: bool = False) -> Extract:
    """A vendor token at a word edge; reject xxxx-style fill-ins (too few distinct chars)."""

    def extract(match: re.Match[str]) -> tuple[int, int] | None:
        start, value = match.start("s"), match["s"]
        # Checked here, not by a leading lookbehind: that would cost the regex engine its
        # fast scan for the literal prefix, ~30 times slower on long texts.
        if start > 0 and match.string[start - 1] in _WORD_CHARS:
            return None
        if len(set(value)) < 6 or PLACEHOLDER_RE.fullmatch(value):
            return None
        if mixed and not (
            any(c.isdigit() for c in value)
            and any(c.isupper() for c in value)
            and any(c.islower() for c in value)
        ):
            return None
        return match.span("s")

    return extract


def span_unless_placeholder(match: re.Match[str]) -> tuple[int, int] | None:
    return None if is_placeholder(match["s"]) else match.span("s")


_WORD_RE = re.compile(r"[A-Za-z_]{1,64}")
_SHORT_NUMBER_RE = re.compile(r"-?[0-9]{1,5}(?:\.[0-9]+)?")
_IN_URL_AUTHORITY = re.compile(r"://[\w.~%+-]{0,128}\Z")
_MORE_WORDS_RE = re.compile(r" [^\s#]")  # the value is followed by more words on its line


def assignment(*, plain_words: bool) -> Extract:
    """The value of ``key = value``, quoted or bare.

    A bare word is taken after ``KEY=value`` or ``key: value`` (``PASSWORD=hunter``), but not
    where it reads as code or prose; ``plain_words`` false refuses lowercase words outright,
    as after a CLI flag ("the --token flag").
    """

    def extract(match: re.Match[str]) -> tuple[int, int] | None:
        text = match.string
        if _IN_URL_AUTHORITY.search(text, max(0, match.start() - 130), match.start()):
            return None  # https://x-access-token:...@host is the URL rule's, password only
        for name in ("dq", "sq", "bq", "eq"):
            if match.start(name) >= 0:
                quoted = match[name]
                return None if is_placeholder(quoted) or is_name(quoted) else match.span(name)
        raw, start = match["bare"], match.start("bare")
        value = trim_bare(raw)
        end, groups = start + len(value), match.groupdict()
        if len(value) < 4 or _SHORT_NUMBER_RE.fullmatch(value):  # token: 0, token = -1
            return None
        if is_placeholder(value) or is_reference(raw) or is_reference(value):
            return None
        after = text[start + len(raw) : start + len(raw) + 1]
        code = (
            groups.get("kq")
            or (groups.get("sep") or "")[:1].isspace()
            or raw != value
            or after in (",", ")")
        )
        in_prose = _MORE_WORDS_RE.match(text, end)
        if _WORD_RE.fullmatch(value) and (
            code  # {"token": comma} (JSON has no bare words), token = Name, f(token=word)
            or in_prose  # "invalid token: expected 3"
            or INNER_CAPITAL_RE.search(value)  # password: HiddenText, a type
            or (not plain_words and value.islower())  # "the --token flag"
        ):
            return None
        return start, end

    return extract


def prose(match: re.Match[str]) -> tuple[int, int] | None:
    credentials = match["kw"][:4].lower() == "cred"
    if match["verb"].lower() in ("are", "were") and not credentials:
        return None  # "the keys are now *always* written": a statement about keys
    if match.start("qv") >= 0 and not credentials:
        return None if is_placeholder(match["qv"]) else match.span("qv")
    group = "bare" if match.start("bare") >= 0 else "qv"
    value, start = match[group].rstrip(".,;:)"), match.start(group)
    if credentials and (colon := value.find(":")) > 0:
        value, start = value[colon + 1 :], start + colon + 1  # "are deploy:pw": pw only
    if len(value) < 6 or is_plain_word(value.strip("*_~")) or is_placeholder(value):
        return None
    return None if is_reference(value) else (start, start + len(value))


def credential(match: re.Match[str]) -> tuple[int, int] | None:
    value = trim_bare(match["s"])
    if is_placeholder(value) or is_plain_word(value) or len(value) < 6:
        return None
    if is_reference(value) and not any(c.isdigit() for c in value):
        return None  # "AUTHORIZATION": tokens.Keyword
    return match.start("s"), match.start("s") + len(value)


_NOT_LOWER_HEX_RE = re.compile(r"[A-Z/+]")


def aws_secret(match: re.Match[str]) -> tuple[int, int] | None:
    value = match["s"]
    if is_placeholder(value):  # AWS's documented wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
        return None
    # A 40-character lowercase-hex run is a git SHA, not a secret key.
    if not _NOT_LOWER_HEX_RE.search(value) or len(set(value)) < 10:
        return None
    return match.span("s")


_PEM_END = r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_FULL_BODY_RE = re.compile(r"(?:[^-]|-(?!----)){0,65536}+(?=" + _PEM_END + ")")
# Without an END line (a truncated paste), take base64 lines only, not the prose after them.
_PEM_PARTIAL_BODY_RE = re.compile(r"(?:(?:\s|\\[nr])*+[A-Za-z0-9+/=]{16,128}+){0,1024}+")


def pem_body(match: re.Match[str]) -> tuple[int, int] | None:
    text, start = match.string, match.end()
    body = _PEM_FULL_BODY_RE.match(text, start) or _PEM_PARTIAL_BODY_RE.match(text, start)
    end = body.end() if body else start
    # Keep the line breaks (real or JSON-escaped \n) next to the markers.
    while start < end:
        if text[start].isspace():
            start += 1
        elif text.startswith(("\\n", "\\r"), start):
            start += 2
        else:
            break
    while end > start:
        if text[end - 1].isspace():
            end -= 1
        elif end - start >= 2 and text[end - 2] == "\\" and text[end - 1] in "nr":
            end -= 2
        else:
            break
    return (start, end) if end > start else None


# --- Where the grammar says little: the value must look like a secret -----------------------

# Before "key": a word that makes it a credential (api key), or one that makes it data.
_SECRET_KEY_PREFIX_RE = re.compile(
    r"(?:api|access|secret|private|signing|encryption|master|client|license|account|service"
    r"|app|auth|hmac)[ _.-]?\Z",
    re.IGNORECASE,
)
_DATA_KEY_PREFIX_RE = re.compile(
    r"(?:primary|foreign|unique|composite|natural|surrogate|cache|idempotency|partition|sort"
    r"|routing|shard|lookup|dedupe?|object|s3|public|host|gpg|pgp|index|row|hash|map|dict)"
    r"[ _.-]?\Z",
    re.IGNORECASE,
)


def _line_before(text: str, at: int, size: int) -> str | None:
    """Up to ``size`` characters before ``at`` on its line; None if they hold a redaction.

    A rule that reads the words before a value could decide otherwise on a second pass, once
    a redaction has shortened the line or taken a word; leaving such a value as the first
    pass left it keeps ``redact(redact(x)) == redact(x)``.
    """
    start = max(0, at - size)
    before = text[text.rfind("\n", start, at) + 1 or start : at]
    return None if REDACTED in before else before


def _opens_code(text: str, end: int) -> bool:
    # A bare value cut short by a bracket is a call, a subscript or markup: f(x), a[0], <b>.
    return text[end : end + 1] in ("(", "[", "{", "<")


_EMPHASIS_END_RE = re.compile(r"(?<=[^*_])(?:\*{1,3}|_{1,3})\Z")


def _emphasis_closed(text: str, at: int, value: str) -> str:
    """``value`` without the Markdown marks that close an emphasis opened before the keyword
    on its line: in ``**Secret Scanning**:`` the value is ``Scanning``, not ``Scanning**``
    (whose symbols would make a plain word look like a password). The opening marks start a
    word; only what follows the line's last redaction counts, so that a second pass decides
    as the first did."""
    marks = _EMPHASIS_END_RE.search(value)
    if marks is None:
        return value
    line = text[text.rfind("\n", 0, at) + 1 : at + 1]  # and the keyword's first letter
    if REDACTED in line:
        line = line[line.rfind(REDACTED) + len(REDACTED) :]
    opened = re.search(r"(?:^|[\s(\[])" + re.escape(marks[0]) + r"[^\s*_]", line)
    return value[: marks.start()] if opened else value


def keyword_value(match: re.Match[str]) -> tuple[int, int] | None:
    """A value right after a keyword with only whitespace between: ``with secret X``.

    The grammar says nothing here, so the value must look like a secret. After ``key`` or
    ``webhook`` (a dict key, a keyboard key) only an encoded value counts, and not after a
    data-ish qualifier (``cache key``, ``public key``).
    """
    text, at = match.string, match.start()
    if at > 0 and text[at - 1].isalnum() and not (text[at].isupper() and text[at - 1].islower()):
        return None  # inside a word: monkey, but SecretAccessKey is two
    quoted = match.start("qv") >= 0
    if not quoted and _opens_code(text, match.end("bare")):
        return None
    value = match["qv"] if quoted else _emphasis_closed(text, at, trim_bare(match["bare"]))
    start = match.start("qv") if quoted else match.start("bare")
    if is_placeholder(value):
        return None
    keyword = match["kw"].lower()
    before = _line_before(text, at, 16)
    if keyword in ("key", "webhook") and not (before and _SECRET_KEY_PREFIX_RE.search(before)):
        if before is None or _DATA_KEY_PREFIX_RE.search(before) or not is_encoded(value):
            return None
    elif not looks_secret(value):
        return None
    return start, start + len(value)


_ACCOUNT_NAMES = frozenset(
    {
        "admin", "administrator", "root", "sa", "postgres", "guest", "user", "test", "demo",
        "elastic", "superuser", "sysadmin", "operator", "ubuntu", "oracle", "system",
    }
)  # fmt: skip
_ACCOUNT_RE = re.compile(r"[\w.@+-]{1,64}")
_LOGIN_CONTEXT_RE = re.compile(r"log ?in|sign ?in|user|account|cred", re.IGNORECASE)


def user_slash_password(match: re.Match[str]) -> tuple[int, int] | None:
    """``admin / X``: an account name (or a login word earlier on the line), then a secret."""
    text, at = match.string, match.start()
    before = _line_before(text, at, 100)
    user = before.rsplit(None, 1)[-1] if before and before.strip() else ""
    if before is None or not _ACCOUNT_RE.fullmatch(user) or not before.endswith(user):
        return None
    if not (
        user.lower() in _ACCOUNT_NAMES
        or "@" in user
        or _LOGIN_CONTEXT_RE.search(before, 0, len(before) - len(user))
    ):
        return None
    if _opens_code(text, match.end("s")):
        return None
    value = trim_bare(match["s"])
    return (match.start("s"), match.start("s") + len(value)) if looks_secret(value) else None


# --- Command lines and vendor formats that need a look around the match ---------------------


def in_command(command: str) -> Extract:
    """A flag's value, if the flag belongs to ``command``, not to one after ``;`` or ``|``."""
    command_re = re.compile(command)

    def extract(match: re.Match[str]) -> tuple[int, int] | None:
        text, start = match.string, match.start()
        window = max(0, start - 512)
        cut = max(text.rfind(c, window, start) for c in ";|&")
        newline = text.rfind("\n", window, start)
        while newline > window and text[newline - 1] == "\\":  # a continued line
            newline = text.rfind("\n", window, newline - 1)
        segment = text[max(cut, newline, window - 1) + 1 : start]
        if not command_re.search(segment) or is_placeholder(match["s"]):
            return None
        return match.span("s")

    return extract


def telegram(match: re.Match[str]) -> tuple[int, int] | None:
    # The pattern starts at ":AA"; the bot id (8 to 10 digits) before it is part of the token.
    text, colon = match.string, match.start()
    start = colon
    while start > 0 and colon - start < 11 and "0" <= text[start - 1] <= "9":
        start -= 1
    if not 8 <= colon - start <= 10 or len(set(match["s"])) < 10:
        return None
    if start > 0 and text[start - 1] in _WORD_CHARS and not text.endswith("bot", 0, start):
        return None  # api.telegram.org/bot<token>/getMe is fine, x123456789:AA... is not
    return start, match.end()


# A Discord bot token's first part: a snowflake id's decimal digits, base64-encoded.
_DISCORD_ID_RE = re.compile(r"(?:M[Tjz]|N[DTjz]|O[DT])[A-Za-z0-9_-]{21,25}\Z")


def discord(match: re.Match[str]) -> tuple[int, int] | None:
    # Searching the id backwards from the dot is several times cheaper than scanning the
    # whole text for a pattern with no literal to start on.
    text, dot = match.string, match.start()
    head = _DISCORD_ID_RE.search(text, max(0, dot - 27), dot)
    if not head or (head.start() > 0 and text[head.start() - 1] in _WORD_CHARS):
        return None
    return head.start(), match.end()


# Before a 0x-prefixed 64-hex value, the words that make it a hash, not a private key.
_HASH_CONTEXT_RE = re.compile(
    r"hash|(?<![a-z])(?:tx|txn|txid|transaction|block|slot|topic|root|digest|keccak|bytes32"
    r"|salt|receipt|commit|storage)",
    re.IGNORECASE,
)
_REPEAT_RE = re.compile(r"(.)\1{5}")


def hex_private_key(match: re.Match[str]) -> tuple[int, int] | None:
    text, start = match.string, match.start()
    value = match["s"]
    if (start > 0 and text[start - 1] in _WORD_CHARS) or len(set(value)) < 10:
        return None
    if value.isupper() or _REPEAT_RE.search(value):
        return None  # constants in code are written in capitals, or run 0000 or FFFF
    before = _line_before(text, start, 48)
    if before is None or _HASH_CONTEXT_RE.search(before):
        return None  # a transaction or block hash, a storage slot
    return match.span()
