"""The rules: vendor token formats first, then the shapes secrets take in context."""

from __future__ import annotations

import re
from dataclasses import dataclass

from checkpoints.services.redaction.extractors import (
    Extract,
    assignment,
    aws_secret,
    credential,
    discord,
    hex_private_key,
    in_command,
    keyword_value,
    pem_body,
    prose,
    span_unless_placeholder,
    telegram,
    user_slash_password,
    vendor_token,
)


@dataclass(frozen=True, slots=True)
class Rule:
    """A pattern, where to try it, and how to turn a match into the span to blank out."""

    kind: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]  # lowercase; the rule runs only when one occurs in the text
    extract: Extract
    # Where the pattern can start, as lowercase words: found with str.find, which is far
    # faster than letting a case-insensitive or lookbehind-led pattern scan the whole text.
    anchors: tuple[str, ...] = ()
    # Search from the anchor to the end of its logical line instead of only at the anchor:
    # curl ... -u user:pass.
    to_line_end: bool = False


# Key names whose value is a secret. A prefix is allowed (DB_PASSWORD, GITHUB_TOKEN,
# clientSecret), a suffix is not (password_reset_view, token_count, tokenizer).
KEY = r"""
(?:
    pass(?:word|wd|phrase|code)
  | (?<![a-z0-9])(?:pass|pwd|auth)
  | secret | token | credentials?
  | (?:api|access|secret|private|signing|encryption|master|client|account|service)[_.-]?key
)(?![a-z0-9_-])
"""
# Where a KEY (or a prose keyword) can start.
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
    KEY
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
    r"""\b(?P<kw>pass\s?word|passphrase|passcode|pw|token|secret|(?:api|access|secret)[\s_-]?key
      | cred(?:entials?|s))
    (?:[ \t]{1,3}(?:for|of|to|on|in)(?:[ \t]{1,3}[\w.@/-]{1,40}+){1,5}?)?  # for the prod db
    \s{1,3}(?P<verb>is|was|are|were)\s{1,3}(?:set\s{1,3}to\s{1,3}|now\s{1,3})?:?\s{0,3}
    (?: ["'`\u201c\u2018](?P<qv>[^"'`\u201d\u2019\r\n]{1,256}+)["'`\u201d\u2019]
      | (?P<bare>[^\s"'`\u201c\u201d\u2018\u2019]{1,256}+))""",
    re.VERBOSE | re.IGNORECASE,
)
_PROSE_ANCHORS = ("pass", "pw", "token", "secret", "api", "access", "cred")
_NETRC_RE = re.compile(
    r"""(?: machine[ \t]+\S{1,253}+ (?:\s{1,16}(?:login|account|port|protocol)[ \t]+\S{1,256}+){0,4}
          | default (?:\s{1,16}(?:login|account|port|protocol)[ \t]+\S{1,256}+){1,4} )
        \s{1,16}password[ \t]+["']?(?P<s>[^\s"']{1,256}+)""",
    re.VERBOSE,
)
_REGISTRY_CLIENTS = ("docker", "podman", "nerdctl", "buildah", "helm")
# A keyword, whitespace, the value: "with secret X", "SecretAccessKey X,", "webhook <hex>".
_KEYWORD_VALUE_RE = re.compile(
    r"""(?P<kw>pass(?:word|wd|phrase|code)|pwd|pw|secret|token|key|webhook)(?![a-z0-9_-])
    [ \t]{1,3}
    (?: ["'`\u201c\u2018](?P<qv>[^\s"'`\u201d\u2019]{8,256}+)["'`\u201d\u2019]
      | (?P<bare>[^\s"'`<>(){}\[\],;\\\u201c\u201d\u2018\u2019]{8,256}+))""",
    re.VERBOSE | re.IGNORECASE,
)
_XML_RE = re.compile(
    r"<(?P<tag>[a-z0-9_.:-]{0,40}(?:password|passwd|secret|token|api[_-]?key|access[_-]?key))>"
    r"(?P<s>[^<\s][^<]{0,1023}+)</(?P=tag)>",
    re.IGNORECASE,
)


def _vendor(kind: str, body: str, prefixes: tuple[str, ...], *, mixed: bool = False) -> Rule:
    # The secret is the whole token, which must end at a word edge (vendor_token checks the start).
    # ``prefixes`` are the lowercased ways it can start: the hints, and where to try it.
    pattern = re.compile(r"(?P<s>" + body + r")(?![A-Za-z0-9_-])")
    return Rule(kind, pattern, prefixes, vendor_token(mixed=mixed), prefixes)


def _keyed(kind: str, pattern: str, hints: tuple[str, ...], extract: Extract) -> Rule:
    # A case-insensitive rule that starts on one literal word, its hint and anchor.
    return Rule(kind, re.compile(pattern, re.IGNORECASE), hints, extract, hints)


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
    Rule(  # 123456789:AA...: tried at the colon, the bot id before it is taken in
        "telegram",
        re.compile(r":(?P<s>AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])"),
        (":aa",),
        telegram,
        (":aa",),
    ),
    Rule(  # id.timestamp.hmac: tried from the first dot, discord checks the id before it
        "discord",
        re.compile(r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_-])"),
        (".",),
        discord,
    ),
    Rule(
        "hex-private-key",
        re.compile(r"0x(?P<s>[0-9a-fA-F]{64})(?![0-9A-Za-z_])"),
        ("0x",),
        hex_private_key,
        ("0x",),
    ),
)

_CONTEXT_RULES = (
    Rule(
        "private-key",
        re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
        ("-----begin",),
        pem_body,
    ),
    _keyed(
        "aws-secret-key",
        r"(?:aws[\w .-]{0,32}?secret|secret[ _-]?access)[\w .-]{0,32}?"
        + _QUOTE
        + r"(?:[ \t]{0,4}\[[^\]\r\n]{0,20}\])?"  # aws configure: Secret Access Key [None]:
        + r"[ \t]{0,4}(?:=>|:=|[:=])?[ \t]{0,4}"
        + _QUOTE
        + r"(?<![A-Za-z0-9/+])(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("aws", "secret"),
        aws_secret,
    ),
    Rule(  # credentials.csv and friends: the key id, then its secret
        "aws-secret-key",
        re.compile(
            r"A(?:KIA|SIA)[A-Z0-9]{16}[\s,;:|\"']{1,6}(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("akia", "asia"),
        aws_secret,
    ),
    Rule(
        "slack-webhook",
        re.compile(
            r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_-]{20,200}+)"
        ),
        ("hooks.slack.com",),
        span_unless_placeholder,
    ),
    Rule(
        "discord-webhook",
        re.compile(r"discord(?:app)?\.com/api/webhooks/[0-9]{5,30}/(?P<s>[A-Za-z0-9_-]{40,100}+)"),
        ("discord",),
        span_unless_placeholder,
    ),
    _keyed(  # also Proxy-Authorization: the prefix stays, only the credential goes
        "authorization",
        r"(?<![a-z0-9])authorization"
        + _QUOTE
        + r"[ \t]{0,4}[:=][ \t]{0,4}(?:[fr]?\\?[\"'])?"
        + r"(?:(?:bearer|basic|token|bot|apikey|key|negotiate|ntlm)[ \t]{1,4})?"
        + r"(?P<s>[^\s\"'\\,;]{1,4096}+)",
        ("authorization",),
        credential,
    ),
    _keyed(
        "bearer",
        r"(?<![a-z0-9])bearer[ \t]{1,4}(?P<s>[A-Za-z0-9._~+/-]{8,4096}+=*)",
        ("bearer",),
        credential,
    ),
    _keyed(  # also Set-Cookie
        "cookie",
        r"(?<![a-z0-9])cookie"
        + _QUOTE
        + r"[ \t]{0,4}:[ \t]{0,4}"
        + _QUOTE
        + r"(?P<s>[^\s\"'\\=;]{1,256}+=[^\r\n\"'\\]{1,4096}+)",
        ("cookie",),
        credential,
    ),
    Rule(  # scheme://user:password@host: only the password goes, raw "#" and all
        "url-credentials",
        re.compile(
            r"://(?<=[A-Za-z0-9]://)[^\s:/?#@\"'<>]{0,128}+:(?P<s>[^\s/?@\"'<>]{1,256}+)@(?=[\w\[])"
        ),
        ("://",),
        span_unless_placeholder,
    ),
    Rule(
        "curl-user",
        re.compile(
            r"-(?<!\S-)(?:[A-Za-z]{0,4}u|-user)(?:[ \t]{1,4}|=)?[\"']?"  # -u, -su, --user
            r"(?:\$\{?\w{1,64}\}?|[^\s:\"'$]{0,128}+):(?P<s>[^\s\"']{1,256}+)"  # $USER:pw, :token
        ),
        ("curl",),
        span_unless_placeholder,
        ("curl",),
        to_line_end=True,  # -u is a credential for curl only, not for docker run -u 1000:1000
    ),
    Rule(  # a password flag after login only: docker run -p 8080:80 is a port
        "registry-login",
        re.compile(r"-(?<!\S-)(?:p|-password)(?:[ \t]{1,4}|=)[\"']?(?P<s>[^\s\"']{1,256}+)"),
        _REGISTRY_CLIENTS,
        in_command(r"(?:docker|podman|nerdctl|buildah|registry)[ \t]+login[ \t]"),
        _REGISTRY_CLIENTS,
        to_line_end=True,
    ),
    Rule(  # mysql -pX, attached: "-p X" prompts for the password and X is the database
        "mysql-password",
        re.compile(r"-(?<!\S-)p[\"']?(?P<s>[^\s\"'-][^\s\"']{0,255}+)"),
        ("mysql", "mariadb"),
        in_command(r"(?<![\w-])(?:mysql(?:dump|admin|import|check|sh)?|mariadb)[ \t]"),
        ("mysql", "mariadb"),
        to_line_end=True,
    ),
    Rule(
        "sshpass",
        re.compile(
            r"sshpass(?:[ \t]{1,4}-[A-Za-oq-z]\S{0,64}+){0,3}[ \t]{1,4}-p[ \t]{0,4}[\"']?"
            r"(?P<s>[^\s\"']{1,256}+)"
        ),
        ("sshpass",),
        span_unless_placeholder,
        ("sshpass",),
    ),
    Rule(  # .netrc, on one line or several: machine h login u password X
        "netrc",
        _NETRC_RE,
        ("machine", "default"),
        span_unless_placeholder,
        ("machine", "default"),
    ),
    Rule(
        "assignment",
        _ASSIGNMENT_RE,
        ("pass", "secret", "token", "key", "auth", "cred", "pwd"),
        assignment(plain_words=True),
        _KEY_ANCHORS,
    ),
    Rule(
        "cli-flag",
        _CLI_FLAG_RE,
        ("pass", "secret", "token", "key"),
        assignment(plain_words=False),
        ("--",),
    ),
    Rule("prose", _PROSE_RE, _PROSE_ANCHORS, prose, _PROSE_ANCHORS),
    Rule(
        "keyword-value",
        _KEYWORD_VALUE_RE,
        ("pass", "pw", "secret", "token", "key", "webhook"),
        keyword_value,
        ("pass", "pw", "secret", "token", "key", "webhook"),
    ),
    Rule(
        "user-password",
        re.compile(r"[ \t]/[ \t](?P<s>[^\s\"'`<>(){}\[\],;\\]{8,128}+)"),
        (" / ",),
        user_slash_password,
        (" / ",),
    ),
    Rule(
        "xml",
        _XML_RE,
        ("pass", "secret", "token", "key"),
        span_unless_placeholder,
        ("<",),
    ),
)

RULES: tuple[Rule, ...] = _VENDOR_RULES + _CONTEXT_RULES
