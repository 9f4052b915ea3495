"""Secret redaction for everything that leaves the server: digests, recovery context, replies.

The patterns are written from the token formats vendors document (prefixes, lengths,
charsets), plus the generic shapes secrets take in transcripts: ``KEY=value`` and
``"key": "value"`` pairs under secret-ish names, ``Authorization`` headers, credentials in
URLs, ``curl -u``, PEM private keys and prose such as "the password is ...".

Two properties matter more than recall on exotic formats:

* Precision on what agents write all day: git SHAs, UUIDs, digests, paths, URLs, code that
  *refers* to a secret (``os.environ["TOKEN"]``, ``password: str``) are left alone.
* Bounded cost: every rule starts on a literal or keyword, every quantifier is bounded and
  possessive, and a rule only runs when one of its hint substrings occurs, so a 2 KB text
  costs a fraction of a millisecond and a 1 MiB text stays linear.

Standard library only, no Django: scripts and the benchmark import it directly.
"""

from __future__ import annotations

import keyword
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

REDACTED = "[REDACTED]"

__all__ = ["REDACTED", "Finding", "contains_secret", "find_secrets", "redact", "redact_data"]


class Finding(NamedTuple):
    """A secret's span in a text, and the kind of rule that found it."""

    start: int
    end: int
    kind: str


_Extract = Callable[[re.Match[str]], tuple[int, int] | None]


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]  # lowercase; the rule runs only when one occurs in the text
    extract: _Extract
    # Where the pattern can start, as lowercase words: found with str.find, which is far
    # faster than letting a case-insensitive or lookbehind-led pattern scan the whole text.
    anchors: tuple[str, ...] = ()
    # Search from the anchor to the end of its logical line instead of only at the anchor:
    # curl ... -u user:pass.
    to_line_end: bool = False


# --- What is not a secret -------------------------------------------------------------------

_PLACEHOLDER_WORDS = frozenset(
    {
        *(word.lower() for word in [*keyword.kwlist, *keyword.softkwlist]),
        # Literal stand-ins seen in docs, samples and compose files.
        "null", "nil", "undefined", "yes", "no", "on", "off", "empty", "none", "n/a", "na",
        "tbd", "todo", "redacted", "hidden", "masked", "omitted", "changeme", "change_me",
        "change-me", "replaceme", "replace_me", "replace-me", "password", "passwd", "pass",
        "secret", "token", "required", "optional", "bearer", "basic", "auth", "pwd",
        "credential", "credentials", "apikey", "api_key", "access_token", "secret_key",
        # Type annotations: ``password: str``, ``token: string;``.
        "str", "string", "bytes", "int", "bool", "boolean", "number", "any", "object",
        "unknown", "void", "float", "dict", "list", "tuple",
        # Status words in logs: "auth: ok", "token: expired".
        "ok", "enabled", "disabled", "default", "missing", "unset", "expired", "invalid",
        "valid", "success", "failed", "error",
    }
)  # fmt: skip

_PLACEHOLDER_RE = re.compile(
    r"""
      \$[{(].{0,300}                # ${VAR}, ${{ secrets.X }}, $(pass show db)
    | \$[A-Za-z_]\w{0,100}          # $VAR
    | %\(\w{1,100}\)[sdr] | %[sdr]  # printf-style
    | %[A-Za-z_]\w{0,100}%          # %VAR% on Windows
    | \{\{.{1,200}\}\}              # {{ template }}
    | \{.{0,300}                    # {token}, {make_token(user)}: interpolation
    | <[^<>]{1,100}>                # <token>, <your-api-key>
    | ![A-Za-z_]\S{0,100}           # YAML tags: !vault
    | \[{1,2}[\w -]{1,100}\]{1,2}  # [password], [[username]]
    | \#[0-9a-f]{3,8}               # a colour
    | [\W_x]+                       # ***, xxxx, ..., -, YAML block markers: nothing real
    """,
    re.VERBOSE | re.IGNORECASE,
)
_ENV_REFERENCE_RE = re.compile(
    r"(?:os\.environ|os\.getenv|getenv|process\.env|import\.meta\.env|System\.getenv"
    r"|Deno\.env|ENV|env)\s*[\[(.]"
)
# A value that is code: a call, a subscript, an attribute chain (self.token, settings.X).
_REFERENCE_RE = re.compile(
    r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\s*[(\[]|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\Z"
)
# A file path names where a secret lives, it is not one: private_key: ~/.ssh/id_ed25519.
_PATH_RE = re.compile(r"(?:~|\.{1,2})?/(?:[\w.-]+/)+[\w.-]+|(?:~|\.{1,2})?/[\w-]+\.\w{1,8}")
# A format string or template that fills the secret in later: "%(password)s", "{{ token }}".
_TEMPLATE_RE = re.compile(r"%\(\w{1,64}\)[sdr]|%s|\{\{|\{%|\$\{")
_SECRETISH_WORD_RE = re.compile(r"pass|secret|token|key|auth|cred|pwd", re.IGNORECASE)
_INNER_CAPITAL_RE = re.compile(r"[a-z][A-Z]")
_WORD_RE = re.compile(r"[A-Za-z_]{1,64}")
_SHORT_NUMBER_RE = re.compile(r"-?[0-9]{1,5}(?:\.[0-9]+)?")


def _is_placeholder(value: str) -> bool:
    value = value.strip()
    if not value or REDACTED in value:
        return True
    lowered = value.lower()
    if lowered in _PLACEHOLDER_WORDS:
        return True
    if _PLACEHOLDER_RE.fullmatch(value) or _ENV_REFERENCE_RE.match(value):
        return True
    if _PATH_RE.fullmatch(value) or _TEMPLATE_RE.search(value):
        return True
    return (
        lowered.startswith("your")
        or lowered.endswith(("_here", "-here", " here"))
        or any(word in lowered for word in ("example", "placeholder", "dummy"))
    )


def _is_name(value: str) -> bool:
    """A name that mentions the secret rather than holding it: DEFAULT_PASSWORD, authToken."""
    return (
        value.isidentifier()
        and bool(_SECRETISH_WORD_RE.search(value))
        and ("_" in value or bool(_INNER_CAPITAL_RE.search(value)))
        and not any(c.isdigit() for c in value)  # W9etPass7 is a password, not a name
    )


def _is_reference(value: str) -> bool:
    """Unquoted code on the right of ``token =``: ``get_token()``, ``self.token``, ``api_key``."""
    return bool(_REFERENCE_RE.match(value)) or _is_name(value)


def _is_plain_word(value: str) -> bool:
    # "the token is expired", "--token flag": an English word, not a credential.
    return value.isalpha() and value.islower() and len(value) <= 24


_OPENERS = {")": "(", "]": "[", "}": "{"}


def _trim_bare(value: str) -> str:
    # A bare value runs to whitespace; drop the punctuation and closers it does not open:
    # f(token=abc) -> abc, def f(token=None): -> None.
    while value and (
        value[-1] in ".,:;"
        or (value[-1] in _OPENERS and value.count(value[-1]) > value.count(_OPENERS[value[-1]]))
    ):
        value = value[:-1]
    return value


# --- Extractors: from a match to the span to blank out, or None ----------------------------

_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _token(*, mixed: bool = False) -> _Extract:
    """A vendor token at a word edge; reject xxxx-style fill-ins (too few distinct chars)."""

    def extract(match: re.Match[str]) -> tuple[int, int] | None:
        start, value = match.start("s"), match["s"]
        # Checked here, not by a leading lookbehind: that would cost the regex engine its
        # fast scan for the literal prefix, ~30 times slower on long texts.
        if start > 0 and match.string[start - 1] in _WORD_CHARS:
            return None
        if len(set(value)) < 6 or _PLACEHOLDER_RE.fullmatch(value):
            return None
        if mixed and not (
            any(c.isdigit() for c in value)
            and any(c.isupper() for c in value)
            and any(c.islower() for c in value)
        ):
            return None
        return match.span("s")

    return extract


def _span_unless_placeholder(match: re.Match[str]) -> tuple[int, int] | None:
    return None if _is_placeholder(match["s"]) else match.span("s")


_IN_URL_AUTHORITY = re.compile(r"://[\w.~%+-]{0,128}\Z")
_MORE_WORDS_RE = re.compile(r" [^\s#]")  # the value is followed by more words on its line


def _assignment(*, plain_words: bool) -> _Extract:
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
                return None if _is_placeholder(quoted) or _is_name(quoted) else match.span(name)
        raw, start = match["bare"], match.start("bare")
        value = _trim_bare(raw)
        end, groups = start + len(value), match.groupdict()
        if len(value) < 4 or _SHORT_NUMBER_RE.fullmatch(value):  # token: 0, token = -1
            return None
        if _is_placeholder(value) or _is_reference(raw) or _is_reference(value):
            return None
        after = text[start + len(raw) : start + len(raw) + 1]
        code = (
            groups.get("kq")
            or (groups.get("sep") or "")[:1].isspace()
            or raw != value
            or after in (",", ")")
        )
        prose = _MORE_WORDS_RE.match(text, end)
        if _WORD_RE.fullmatch(value) and (
            code  # {"token": comma} (JSON has no bare words), token = Name, f(token=word)
            or prose  # "invalid token: expected 3"
            or _INNER_CAPITAL_RE.search(value)  # password: HiddenText, a type
            or (not plain_words and value.islower())  # "the --token flag"
        ):
            return None
        return start, end

    return extract


def _prose(match: re.Match[str]) -> tuple[int, int] | None:
    if match.start("qv") >= 0:
        return None if _is_placeholder(match["qv"]) else match.span("qv")
    value = match["bare"].rstrip(".,;:)")
    if len(value) < 6 or _is_plain_word(value) or _is_placeholder(value) or _is_reference(value):
        return None
    return match.start("bare"), match.start("bare") + len(value)


def _credential(match: re.Match[str]) -> tuple[int, int] | None:
    value = _trim_bare(match["s"])
    if _is_placeholder(value) or _is_plain_word(value) or len(value) < 6:
        return None
    if _is_reference(value) and not any(c.isdigit() for c in value):
        return None  # "AUTHORIZATION": tokens.Keyword
    return match.start("s"), match.start("s") + len(value)


_NOT_LOWER_HEX_RE = re.compile(r"[A-Z/+]")


def _aws_secret(match: re.Match[str]) -> tuple[int, int] | None:
    value = match["s"]
    # A 40-character lowercase-hex run is a git SHA, not a secret key.
    if not _NOT_LOWER_HEX_RE.search(value) or len(set(value)) < 10:
        return None
    return match.span("s")


_PEM_END = r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_FULL_BODY_RE = re.compile(r"(?:[^-]|-(?!----)){0,65536}+(?=" + _PEM_END + ")")
# Without an END line (a truncated paste), take base64 lines only, not the prose after them.
_PEM_PARTIAL_BODY_RE = re.compile(r"(?:(?:\s|\\[nr])*+[A-Za-z0-9+/=]{16,128}+){0,1024}+")


def _pem_body(match: re.Match[str]) -> tuple[int, int] | None:
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


# --- The rules ------------------------------------------------------------------------------

# Key names whose value is a secret. A prefix is allowed (DB_PASSWORD, GITHUB_TOKEN,
# clientSecret), a suffix is not (password_reset_view, token_count, tokenizer).
_KEY = r"""
(?:
    pass(?:word|wd|phrase|code)
  | (?<![a-z0-9])(?:pass|pwd|auth)
  | secret | token | credentials?
  | (?:api|access|secret|private|signing|encryption|master|client|account|service)[_.-]?key
)(?![a-z0-9_-])
"""
# Where a _KEY (or a prose keyword) can start.
_KEY_ANCHORS = (
    *("pass", "pwd", "auth", "secret", "token", "credential", "api", "access", "private"),
    *("signing", "encryption", "master", "client", "account", "service"),
)
_QUOTE = r"""(?:\\?["'])?"""  # an optional quote, maybe JSON-escaped
_QUOTED_VALUE = r"""
    "(?P<dq>(?:[^"\\\r\n]|\\[^\r\n]){1,2048}+)"
  | '(?P<sq>(?:[^'\\\r\n]|\\[^\r\n]){1,1024}+)'
  | `(?P<bq>[^`\r\n]{1,1024}+)`
  | \\"(?P<eq>[^"\\\r\n]{1,1024}+)\\"             # inside a JSON string: \"value\"
"""
_ASSIGNMENT_RE = re.compile(
    _KEY
    + r"""
    (?P<kq>\\?["'`])?\]?                          # "key": / ['key'] = / key=
    (?P<sep>[ \t]{0,8}(?:=>|:=|=(?!=)|:(?!:))[ \t]{0,8})
    (?:[rRbBuUfF]{1,2}(?=["']))?
    (?:"""
    + _QUOTED_VALUE
    + r"""
      | (?P<bare>[^\s"'`,;&<>(){}\[\]\\][^\s"'`,;&<>\\]{0,1023}+)
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_CLI_FLAG_RE = re.compile(
    r"""--(?<!\S--)(?:[a-z0-9]{1,20}-){0,3}
    (?:password|passwd|passphrase|token|secret|api-?key|access-key|secret-key)[ \t]{1,4}
    (?:"""
    + _QUOTED_VALUE
    + r"""| (?P<bare>[^\s"'`;&|<>(){}\[\]\\-][^\s"'`;&|<>\\]{0,1023}+))""",
    re.VERBOSE | re.IGNORECASE,
)
_PROSE_RE = re.compile(
    r"""\b(?:pass\s?word|passphrase|passcode|token|secret|(?:api|access|secret)[\s_-]?key)
    \s{1,3}(?:is|was)\s{1,3}(?:set\s{1,3}to\s{1,3}|now\s{1,3})?:?\s{0,3}
    (?: ["'`\u201c\u2018](?P<qv>[^"'`\u201d\u2019\r\n]{1,256}+)["'`\u201d\u2019]
      | (?P<bare>[^\s"'`\u201c\u201d\u2018\u2019]{1,256}+))""",
    re.VERBOSE | re.IGNORECASE,
)
_XML_RE = re.compile(
    r"<(?P<tag>[a-z0-9_.:-]{0,40}(?:password|passwd|secret|token|api[_-]?key|access[_-]?key))>"
    r"(?P<s>[^<\s][^<]{0,1023}+)</(?P=tag)>",
    re.IGNORECASE,
)


def _vendor(kind: str, body: str, prefixes: tuple[str, ...], *, mixed: bool = False) -> _Rule:
    # The secret is the whole token, which must end at a word edge (_token checks the start).
    # ``prefixes`` are the lowercased ways it can start: the hints, and where to try it.
    pattern = re.compile(r"(?P<s>" + body + r")(?![A-Za-z0-9_-])")
    return _Rule(kind, pattern, prefixes, _token(mixed=mixed), prefixes)


def _keyed(kind: str, pattern: str, hints: tuple[str, ...], extract: _Extract) -> _Rule:
    # A case-insensitive rule that starts on one literal word, its hint and anchor.
    return _Rule(kind, re.compile(pattern, re.IGNORECASE), hints, extract, hints)


_VENDOR_RULES = (
    _vendor(
        "jwt",
        r"eyJ[A-Za-z0-9_-]{8,4096}+\.eyJ[A-Za-z0-9_-]{8,8192}+\.[A-Za-z0-9_-]{0,4096}+",
        ("eyj",),
    ),
    _vendor("anthropic", r"sk-ant-[a-z0-9]{2,12}-[A-Za-z0-9_-]{32,256}+", ("sk-ant-",)),
    # Keys always mix cases and digits; "sk-learn-..." style names do not.
    _vendor(
        "openai",
        r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,256}+",
        ("sk-",),
        mixed=True,
    ),
    _vendor(
        "github",
        r"gh[pousr]_[A-Za-z0-9]{36,251}+|github_pat_[A-Za-z0-9_]{22,247}+",
        ("gh", "github_pat_"),
    ),
    _vendor("gitlab", r"gl(?:pat|dt|rt|ptt|ft|cbt)-[A-Za-z0-9_-]{20,64}+", ("gl",)),
    _vendor(
        "aws-access-key-id",
        r"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}",
        ("akia", "asia", "abia", "acca"),
    ),
    _vendor(
        "slack",
        r"x(?:ox[abposre]-[A-Za-z0-9-]{10,250}+|app-[A-Za-z0-9-]{20,250}+)",
        ("xox", "xapp-"),
    ),
    _vendor(
        "stripe",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,247}+|whsec_[A-Za-z0-9]{24,64}+",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    ),
    _vendor("google-api-key", r"AIza[A-Za-z0-9_-]{35}", ("aiza",)),
    _vendor(
        "google-oauth",
        r"GOCSPX-[A-Za-z0-9_-]{28}|ya29\.[A-Za-z0-9_-]{20,2048}+",
        ("gocspx-", "ya29."),
    ),
    _vendor("npm", r"npm_[A-Za-z0-9]{36}", ("npm_",)),
    _vendor("huggingface", r"hf_[A-Za-z0-9]{30,40}", ("hf_",)),
    _vendor("sendgrid", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", ("sg.",)),
    _vendor("twilio", r"SK[0-9a-fA-F]{32}", ("sk",)),
    _vendor("pypi", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,512}+", ("pypi-",)),
    _vendor("digitalocean", r"do[opr]_v1_[a-f0-9]{64}", ("doo_v1_", "dop_v1_", "dor_v1_")),
    _vendor("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", ("shp",)),
    _vendor("signet", r"sig_[A-Za-z0-9_-]{40,64}+", ("sig_",), mixed=True),  # our own API tokens
)

_CONTEXT_RULES = (
    _Rule(
        "private-key",
        re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
        ("-----begin",),
        _pem_body,
    ),
    _keyed(
        "aws-secret-key",
        r"aws[\w .-]{0,32}?secret[\w .-]{0,32}?"
        + _QUOTE
        + r"[ \t]{0,4}(?:=>|:=|[:=])?[ \t]{0,4}"
        + _QUOTE
        + r"(?<![A-Za-z0-9/+])(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("aws",),
        _aws_secret,
    ),
    _Rule(  # credentials.csv and friends: the key id, then its secret
        "aws-secret-key",
        re.compile(
            r"A(?:KIA|SIA)[A-Z0-9]{16}[\s,;:|\"']{1,6}(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("akia", "asia"),
        _aws_secret,
    ),
    _Rule(
        "slack-webhook",
        re.compile(
            r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_-]{20,200}+)"
        ),
        ("hooks.slack.com",),
        _span_unless_placeholder,
    ),
    _Rule(
        "discord-webhook",
        re.compile(r"discord(?:app)?\.com/api/webhooks/[0-9]{5,30}/(?P<s>[A-Za-z0-9_-]{40,100}+)"),
        ("discord",),
        _span_unless_placeholder,
    ),
    _keyed(  # also Proxy-Authorization: the prefix stays, only the credential goes
        "authorization",
        r"(?<![a-z0-9])authorization"
        + _QUOTE
        + r"[ \t]{0,4}[:=][ \t]{0,4}(?:[fr]?\\?[\"'])?"
        + r"(?:(?:bearer|basic|token|bot|apikey|key|negotiate|ntlm)[ \t]{1,4})?"
        + r"(?P<s>[^\s\"'\\,;]{1,4096}+)",
        ("authorization",),
        _credential,
    ),
    _keyed(
        "bearer",
        r"(?<![a-z0-9])bearer[ \t]{1,4}(?P<s>[A-Za-z0-9._~+/-]{8,4096}+=*)",
        ("bearer",),
        _credential,
    ),
    _keyed(  # also Set-Cookie
        "cookie",
        r"(?<![a-z0-9])cookie"
        + _QUOTE
        + r"[ \t]{0,4}:[ \t]{0,4}"
        + _QUOTE
        + r"(?P<s>[^\s\"'\\=;]{1,256}+=[^\r\n\"'\\]{1,4096}+)",
        ("cookie",),
        _credential,
    ),
    _Rule(  # scheme://user:password@host: only the password goes
        "url-credentials",
        re.compile(
            r"://(?<=[A-Za-z0-9]://)[^\s:/?#@\"'<>]{0,128}+:(?P<s>[^\s/?#@\"'<>]{1,256}+)@(?=[\w\[])"
        ),
        ("://",),
        _span_unless_placeholder,
    ),
    _Rule(
        "curl-user",
        re.compile(
            r"-(?<!\S-)(?:u|-user)(?:[ \t]{1,4}|=)?[\"']?[^\s:\"'$]{1,128}+:(?P<s>[^\s\"']{1,256}+)"
        ),
        ("curl",),
        _span_unless_placeholder,
        ("curl",),
        to_line_end=True,  # -u is a credential for curl only, not for docker run -u 1000:1000
    ),
    _Rule(
        "assignment",
        _ASSIGNMENT_RE,
        ("pass", "secret", "token", "key", "auth", "cred", "pwd"),
        _assignment(plain_words=True),
        _KEY_ANCHORS,
    ),
    _Rule(
        "cli-flag",
        _CLI_FLAG_RE,
        ("pass", "secret", "token", "key"),
        _assignment(plain_words=False),
        ("--",),
    ),
    _Rule("prose", _PROSE_RE, ("pass", "secret", "token", "key"), _prose, _KEY_ANCHORS),
    _Rule(
        "xml",
        _XML_RE,
        ("pass", "secret", "token", "key"),
        _span_unless_placeholder,
        ("<",),
    ),
)

_RULES: tuple[_Rule, ...] = _VENDOR_RULES + _CONTEXT_RULES


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _spans(rule: _Rule, text: str, lowered: str) -> Iterator[tuple[int, int]]:
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


def _line_spans(rule: _Rule, text: str, lowered: str) -> Iterator[tuple[int, int]]:
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


def _iter_findings(text: str) -> Iterator[Finding]:
    # ASCII only: str.lower() can change the length (a dotted capital I becomes two code
    # points), and offsets in the lowered copy must be the text's.
    lowered = text.translate(_ASCII_LOWER)
    for rule in _RULES:
        if any(hint in lowered for hint in rule.hints):
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
    r"(?:.*[^a-z0-9])?(?:authorization|cookie)$|.*" + _KEY + r"$",
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
            and not _is_placeholder(item)
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
