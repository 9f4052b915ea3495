"""What a value says on its own: a placeholder, a name, code, or something like a secret.

Most rules know from the grammar that a value follows (``KEY=value``, ``"password": ...``)
and only ask whether it is a stand-in (``${TOKEN}``, ``<your-key>``, ``changeme``), a name
(``DEFAULT_PASSWORD``) or code (``get_token()``). Where the grammar says little, a keyword
then whitespace then a value (``with secret X``, ``admin / X``), prose puts ordinary words
in the same place ("the password field", "token bucket", "primary key"), so the value must
look like a secret by itself: ``looks_secret``.
"""

from __future__ import annotations

import keyword
import re

REDACTED = "[REDACTED]"

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

PLACEHOLDER_RE = re.compile(
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
INNER_CAPITAL_RE = re.compile(r"[a-z][A-Z]")


def is_placeholder(value: str) -> bool:
    value = value.strip()
    if not value or REDACTED in value:
        return True
    lowered = value.lower()
    if lowered in _PLACEHOLDER_WORDS:
        return True
    if PLACEHOLDER_RE.fullmatch(value) or _ENV_REFERENCE_RE.match(value):
        return True
    if _PATH_RE.fullmatch(value) or _TEMPLATE_RE.search(value):
        return True
    return (
        lowered.startswith("your")
        or lowered.endswith(("_here", "-here", " here"))
        or any(word in lowered for word in ("example", "placeholder", "dummy"))
    )


def is_name(value: str) -> bool:
    """A name that mentions the secret rather than holding it: DEFAULT_PASSWORD, authToken."""
    return (
        value.isidentifier()
        and bool(_SECRETISH_WORD_RE.search(value))
        and ("_" in value or bool(INNER_CAPITAL_RE.search(value)))
        and not any(c.isdigit() for c in value)  # W9etPass7 is a password, not a name
    )


def is_reference(value: str) -> bool:
    """Unquoted code on the right of ``token =``: ``get_token()``, ``self.token``, ``api_key``."""
    return bool(_REFERENCE_RE.match(value)) or is_name(value)


def is_plain_word(value: str) -> bool:
    # "the token is expired", "--token flag", "is auto-generated": an English word, not a
    # credential. Three words or more joined by hyphens are a passphrase: correct-horse-battery.
    return value.replace("-", "", 1).isalpha() and value.islower() and len(value) <= 24


_OPENERS = {")": "(", "]": "[", "}": "{"}


def trim_bare(value: str) -> str:
    # A bare value runs to whitespace; drop the punctuation and closers it does not open:
    # f(token=abc) -> abc, def f(token=None): -> None.
    while value and (
        value[-1] in ".,:;"
        or (value[-1] in _OPENERS and value.count(value[-1]) > value.count(_OPENERS[value[-1]]))
    ):
        value = value[:-1]
    return value


# --- What looks like a secret where the grammar says little ---------------------------------

_DIGIT_RE = re.compile(r"[0-9]")
# Characters that words, names, numbers, versions, paths and timestamps rarely hold.
_SYMBOL_RE = re.compile(r"[^A-Za-z0-9\s._/:-]")
# A name's parts: acronyms, capitalised or lowercase words, numbers, separators.
_NAME_PART_RE = re.compile(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+|[A-Z]|[0-9]+|[._/-]")
_HEX_RE = re.compile(r"[0-9a-fA-F]+")
_NAME_ASSIGNED_RE = re.compile(r"[A-Za-z_][\w.-]{0,64}=")
_ENCODED_RE = re.compile(r"[A-Za-z0-9+/_-]{20,256}={0,2}")  # base64, base64url, hex


def _is_identifier_like(value: str) -> bool:
    """Words, acronyms and numbers joined: OAuth2Session, AES-256-GCM, Uploads/2024/Report.

    A two-letter or one-letter lowercase part (Gh7kL2, Sup3rS3cret) is not a word, and a
    single word with a number (Welcome2024) is a password more often than a name.
    """
    parts = _NAME_PART_RE.findall(value)
    if sum(map(len, parts)) != len(value):
        return False
    words = [part for part in parts if part[0].isalpha()]
    if any(len(word) < 3 and not word.isupper() for word in words):
        return False
    return len(words) >= 2 or not any(c.isdigit() for c in value)


def _char_classes(value: str) -> int:
    return (
        (value.upper() != value)  # a lowercase letter
        + (value.lower() != value)  # an uppercase one
        + bool(_DIGIT_RE.search(value))
        + bool(_SYMBOL_RE.search(value))
    )


def is_encoded(value: str) -> bool:
    """Lowercase hex of 32 digits or more, or base64 of 20 or more mixing letters and digits."""
    if len(set(value)) < 10 or not _ENCODED_RE.fullmatch(value):
        return False
    if _HEX_RE.fullmatch(value):
        # Shorter hex is a short SHA or a key id; capitals are a GPG fingerprint or a
        # constant (secrets come from token_hex, openssl rand -hex: lowercase).
        return len(value) >= 32 and not value.isdigit() and value.islower()
    if value.startswith("AAAA") or _is_identifier_like(value):  # an SSH public key; a name
        return False
    digits = sum(c.isdigit() for c in value)
    return (
        digits >= 2
        and any(c.islower() for c in value)
        and (any(c.isupper() for c in value) or value.isalnum())
    )


def looks_secret(value: str) -> bool:
    """A bare value that reads as a credential, not a word, name, number or path.

    Eight characters or more, three classes of lower, upper, digit and symbol (Tr0ub4dor&3,
    Welcome2024!), or an encoded value; never a name (Argon2PasswordHasher), a reference
    (*oauth2.Token), a placeholder or a URL.
    """
    if not 8 <= len(value) <= 256 or len(set(value)) < 6 or "://" in value:
        return False
    if is_placeholder(value) or is_reference(value.lstrip("*&")):
        return False
    if is_encoded(value):
        return True
    if value[0] == "-" or _NAME_ASSIGNED_RE.match(value):  # --flag, OTHER_NAME=$value
        return False
    return not _is_identifier_like(value) and _char_classes(value) >= 3
