"""Secret redaction: a corpus of fabricated secrets that must go and look-alikes that must stay."""

from __future__ import annotations

import json

import pytest

from checkpoints.services.redaction import (
    REDACTED,
    contains_secret,
    find_secrets,
    redact,
    redact_data,
)
from tests.redaction_corpus import _PEM_BODY_ESCAPED, NEGATIVES, POSITIVES, Positive

ALL_LINES = [case.text for case in POSITIVES] + list(NEGATIVES.values())


def test_corpus_size():
    assert len(POSITIVES) >= 110
    assert len(NEGATIVES) >= 70
    assert len({case.id for case in POSITIVES}) == len(POSITIVES)


@pytest.mark.parametrize("case", POSITIVES, ids=lambda case: case.id)
def test_positive_line_is_redacted(case: Positive):
    redacted = redact(case.text)

    for secret in case.secrets:
        assert secret not in redacted
    assert REDACTED in redacted
    # Exact output: the secret parts replaced, every surrounding character kept.
    assert redacted == case.expected
    assert contains_secret(case.text)


@pytest.mark.parametrize("text", NEGATIVES.values(), ids=NEGATIVES.keys())
def test_negative_line_is_unchanged(text: str):
    assert redact(text) == text
    assert not contains_secret(text)
    assert find_secrets(text) == []


@pytest.mark.parametrize("text", ALL_LINES)
def test_redact_is_idempotent(text: str):
    once = redact(text)

    assert redact(once) == once
    assert not contains_secret(once)


def test_whole_corpus_as_one_text():
    # Joined, the lines must not interact: same result as line by line.
    text = "\n".join(ALL_LINES)

    assert redact(text) == "\n".join(redact(line) for line in ALL_LINES)


SEPARATORS = ("", " ", "\n", "://", "=", ": ", '"', "\\n", ")", "password=", "token: ")


def test_redact_is_idempotent_on_spliced_lines():
    # Cut-and-joined corpus lines make the odd neighbours (a URL scheme before a key, a key
    # inside a rejected value) that one line never shows. Deterministic: every line, cut at
    # a few places, each followed by every separator and two other lines.
    count = len(ALL_LINES)
    for index, line in enumerate(ALL_LINES):
        for step, separator in enumerate(SEPARATORS):
            cut = (index * 7 + step * 13) % (len(line) + 1)
            after = ALL_LINES[(index * 5 + step + 1) % count]
            last = ALL_LINES[(index * 11 + step * 3 + 2) % count]
            text = line[cut:] + separator + after + SEPARATORS[-1 - step] + last
            once = redact(text)

            assert redact(once) == once, text


def test_json_escaped_pem_keeps_the_json_valid():
    payload = json.dumps(
        {
            "tool": "Read",
            "output": "-----BEGIN RSA PRIVATE KEY-----\n"
            + _PEM_BODY_ESCAPED.replace("\\n", "\n")
            + "\n-----END RSA PRIVATE KEY-----\n",
        }
    )
    assert "\\n" in payload  # the PEM's line breaks are literal backslash-n here

    redacted = redact(payload)

    assert json.loads(redacted)["output"] == (
        f"-----BEGIN RSA PRIVATE KEY-----\n{REDACTED}\n-----END RSA PRIVATE KEY-----\n"
    )
    assert json.loads(redacted)["tool"] == "Read"


def test_overlapping_findings_merge_into_one_marker():
    line = "GITHUB_TOKEN=ghp_6LZQ9SMDcEVV8bOhUVXoqmaQzE4ftUvXQICh"
    kinds = {finding.kind for finding in find_secrets(line)}

    assert kinds == {"assignment", "github"}
    assert redact(line) == f"GITHUB_TOKEN={REDACTED}"


def test_find_secrets_names_the_kind():
    findings = find_secrets("key AKIA44U7PO54BTVIJSM4 and the password is hunter2")

    assert [finding.kind for finding in findings] == ["aws-access-key-id", "prose"]


def test_redact_data_nested():
    data = {
        "session": "0b6f3f0e-8f5c-4d7e-9b61-1f2a3c4d5e6f",
        "password": "hunter2",
        "GITHUB_TOKEN": "Zx8q1Lm2Nv3Bc4Xz5Aq6",
        "headers": {"Authorization": "Bearer f4Kx92LmQz7TnR0pWv3YbE6u", "Accept": "*/*"},
        "steps": [
            "ran tests",
            ("export API_KEY=4f9Tz1Qm7Lx0Vb2N", 3),
            {"client_secret": "Ct9-qLz0Ymv4Rr", "retries": 2},
        ],
        "prompt_count": 12,
        "ended": None,
        "live": True,
        "ratio": 0.5,
    }

    result = redact_data(data)

    assert result == {
        "session": "0b6f3f0e-8f5c-4d7e-9b61-1f2a3c4d5e6f",
        "password": REDACTED,
        "GITHUB_TOKEN": REDACTED,
        "headers": {"Authorization": REDACTED, "Accept": "*/*"},
        "steps": [
            "ran tests",
            (f"export API_KEY={REDACTED}", 3),
            {"client_secret": REDACTED, "retries": 2},
        ],
        "prompt_count": 12,
        "ended": None,
        "live": True,
        "ratio": 0.5,
    }
    assert isinstance(result["steps"][1], tuple)
    assert data["password"] == "hunter2"  # the input is not modified


def test_redact_data_secret_keys_keep_placeholders_and_non_strings():
    data = {
        "api_key": "${OPENAI_API_KEY}",
        "token": "",
        "secret": "[REDACTED]",
        "password": None,
        "auth": 0,
        "credentials": {"user": "bob", "passwd": "Pw-2024-x"},
        "token_count": "1234",
        "password_reset_url": "https://app.test/reset",
    }

    assert redact_data(data) == {
        "api_key": "${OPENAI_API_KEY}",
        "token": "",
        "secret": "[REDACTED]",
        "password": None,
        "auth": 0,
        "credentials": {"user": "bob", "passwd": REDACTED},
        "token_count": "1234",
        "password_reset_url": "https://app.test/reset",
    }


def test_redact_data_scalars_and_free_text():
    assert redact_data("the password is hunter2") == f"the password is {REDACTED}"
    assert redact_data(42) == 42
    assert redact_data(None) is None
    assert redact_data(["AKIA44U7PO54BTVIJSM4"]) == [REDACTED]


def test_redact_data_is_idempotent():
    data = {"password": "hunter2", "log": ["DB_PASSWORD=hunter2!x", {"token": "abcdef123456"}]}

    once = redact_data(data)

    assert redact_data(once) == once


def test_untouched_text_is_returned_as_is():
    text = "plain prose without anything to hide"

    assert redact(text) is text


# --- Robustness: long and adversarial inputs finish, and stay correct --------------------------

MIB = 1024 * 1024
SECRET = "ghp_6LZQ9SMDcEVV8bOhUVXoqmaQzE4ftUvXQICh"


def _fill(unit: str) -> str:
    return unit * (MIB // len(unit))


ADVERSARIAL = {
    "letters": _fill("a"),
    "key-words": _fill("password token secret api_key "),
    "open-json-strings": _fill('"password": "'),
    "pem-headers": _fill("-----BEGIN RSA PRIVATE KEY-----"),
    "pem-body-no-end": "-----BEGIN PRIVATE KEY-----\n" + _fill("QUJD"),
    "url-userinfo": _fill("https://user:"),
    "vendor-prefixes": _fill("sk-ghp_xoxb-AKIA"),
    "curl-lines": _fill("curl -u a:"),
    "keyword-values": _fill("password Ab3!xyz9 / "),
    "bare-keywords": _fill("token key secret pw webhook "),
    "prose-qualifiers": _fill("password for the db "),
    "registry-logins": _fill("docker login -u x "),
    "mysql-lines": _fill("mysql -u a "),
    "netrc-machines": _fill("machine h login u "),
    "user-slashes": _fill("admin / "),
    "telegram-colons": _fill("123456789:AA"),
    "discord-dots": _fill("MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ."),
    "hex-prefixes": _fill("0x"),
}


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_one_mebibyte_adversarial_input_completes(text: str):
    # No timing assertion: bounded, possessive quantifiers keep this linear, so a regression
    # shows as a hung test rather than as a flaky threshold.
    padded = f"{text}\nexport GITHUB_TOKEN={SECRET}\n"

    redacted = redact(padded)

    assert SECRET not in redacted
    assert redacted.endswith(f"\nexport GITHUB_TOKEN={REDACTED}\n")
