"""A hook's body: read once into one buffer, and parsed keeping only what its adapter reads.

Claude Code's PostToolUse for a Write carries the file twice (``tool_input.content`` and
again in ``tool_response``), so an edit of a 10 MB file posts 20 MB or more. Read with
``request.body`` and parsed with ``json.loads``, such a body would be held as bytes, again
as text, and a third time as the parsed strings. Here a body is read into one buffer, up to its
declared length, and a large one is parsed member by member: the members its adapter says it
never reads (``payload_skips``) are checked for JSON syntax in place and never built, so the
buffer is the only copy of them. A body within ``SIGNET_MAX_BODY_BYTES`` (every hook event
but a big edit's) is parsed whole, as any other API body.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from django.http import HttpRequest
from rest_framework.exceptions import ParseError

from checkpoints.api.parsers import MAX_JSON_DEPTH, json_load
from checkpoints.harnesses.base import PayloadSkips

_READ_STEP = 256 * 1024
# The environ key under which ``ChunkedBodyMiddleware`` leaves a hook's body it had to read
# (one sent without a length), so that the view does not copy it.
READ_BODY_KEY = "signet.read_body"
_UTF8_STEP = 1024 * 1024

_WHITESPACE = re.compile(rb"[ \t\n\r]*")
# A JSON token other than a string: a number, a literal or one of the structural characters.
_TOKEN = re.compile(
    rb"(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
    rb"|(?P<literal>true|false|null)"
    rb"|(?P<open>[\[{])|(?P<close>[\]}])"
)
# A string is read in pieces of about ``_STRING_STEP`` bytes by the ``json`` module, each
# piece decoded as Latin-1 (a character a byte, so the decoder's positions are the buffer's;
# UTF-8 is checked apart). A piece ends after a character followed by a backslash, or after
# six without one, so no escape is ever cut in two; a quote added at its end closes the
# string there, unless the string closed before it.
_STRING_STEP = 1024 * 1024
_DECODER = json.JSONDecoder()
_PIECE_END = re.compile(rb"[^\\](?=\\)|[^\\]{6}")


class Readable(Protocol):
    """A stream of bytes: a request (``HttpRequest.read``), a file."""

    def read(self, size: int = -1, /) -> bytes: ...


def body_of(request: HttpRequest, length: int) -> bytearray | None:
    """A hook request's body: the buffer the middleware read it into, or else its
    ``length`` bytes (``body_read``); None when it ends before them."""
    read = request.META.pop(READ_BODY_KEY, None)
    if isinstance(read, bytearray) and len(read) == length:
        return read
    return body_read(request, length)


def body_read(stream: Readable, length: int) -> bytearray | None:
    """The ``length`` bytes of ``stream`` in one buffer, read in steps (a single large read
    would be buffered again by the server); None when the stream ends before them. The
    buffer grows with what arrives: a client that declares a big body and sends little
    costs what it sent, not what it declared."""
    buffer = bytearray()
    while len(buffer) < length:
        part = stream.read(min(_READ_STEP, length - len(buffer)))
        if not part:
            return None
        buffer += part
    return buffer


def payload_load(buffer: bytes | bytearray, *, skips: PayloadSkips, whole_within: int) -> Any:
    """The JSON in ``buffer``, or raise ``ParseError`` with the reason.

    Within ``whole_within`` bytes it is parsed whole (``json_load``). A larger body must be
    an object: each top-level member named in ``skips`` is checked and left out (``None``),
    or, when it is an object, only its named members are kept; every other member is parsed
    as usual. NULs and lone surrogates pass, as ``json_load(storable_only=False)`` lets them.
    """
    if len(buffer) <= whole_within or not skips:
        try:
            text = str(buffer, "utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not valid JSON: it is not UTF-8 ({exc}).") from None
        return json_load(text, storable_only=False)
    _utf8_check(buffer)
    return _Sparse(buffer, skips).top()


def _utf8_check(buffer: bytes | bytearray) -> None:
    """Refuse a body that is not UTF-8, a step at a time (the skipped members too)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(buffer)
    try:
        for start in range(0, len(buffer), _UTF8_STEP):
            decoder.decode(view[start : start + _UTF8_STEP])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ParseError(f"The body is not valid JSON: it is not UTF-8 ({exc}).") from None


class _Sparse:
    """One pass over a body's bytes: the kept values decoded, the skipped ones checked."""

    def __init__(self, buffer: bytes | bytearray, skips: PayloadSkips) -> None:
        self.buffer = buffer
        self.view = memoryview(buffer)
        self.skips = skips

    def top(self) -> dict[str, Any]:
        position = self.space(0)
        if self.buffer[position : position + 1] != b"{":
            raise ParseError("The body must be a JSON object.")
        payload: dict[str, Any] = {}

        def member(key: str, start: int) -> int:
            payload.pop(key, None)  # a later duplicate wins, as in json.loads
            if key not in self.skips:
                end = self.value_end(start, depth=1)
                payload[key] = self.decode(start, end)
                return end
            kept = self.skips[key]
            if not kept or self.buffer[start : start + 1] != b"{":
                return self.value_end(start, depth=1)
            inner: dict[str, Any] = {}

            def inner_member(name: str, at: int) -> int:
                end = self.value_end(at, depth=2)
                if name in kept:
                    inner[name] = self.decode(at, end)
                return end

            end = self.members(start, depth=2, member=inner_member)
            payload[key] = inner
            return end

        rest = self.space(self.members(position, depth=1, member=member))
        if rest != len(self.buffer):
            raise self.fail(rest, "extra data after the object")
        return payload

    def members(self, position: int, *, depth: int, member: Callable[[str, int], int]) -> int:
        """Hand each member of the object at ``position`` (its name, where its value starts)
        to ``member``, which says where the value ends; where the object ends."""
        position = self.space(position + 1)
        if self.buffer[position : position + 1] == b"}":
            return position + 1
        while True:
            key_end = self.string_end(position)
            colon = self.space(key_end)
            if self.buffer[colon : colon + 1] != b":":
                raise self.fail(colon, "expected ':'")
            name = self.decode(position, key_end)
            position = self.space(member(name, self.space(colon + 1)))
            following = self.buffer[position : position + 1]
            if following == b"}":
                return position + 1
            if following != b",":
                raise self.fail(position, "expected ',' or '}'")
            position = self.space(position + 1)

    def value_end(self, position: int, *, depth: int) -> int:
        """Where the value at ``position`` ends (inside ``depth`` levels already), its syntax
        checked and its nesting bounded, without building it and without recursion."""
        closers: list[bytes] = []
        while True:
            position = self.space(position)
            kind, end = self.token(position)
            if kind == "open":
                if depth + len(closers) + 1 > MAX_JSON_DEPTH:
                    raise ParseError(
                        "The body is not valid JSON here: it is nested more than "
                        f"{MAX_JSON_DEPTH} levels."
                    )
                closer = b"}" if self.buffer[position : position + 1] == b"{" else b"]"
                position = self.space(end)
                if self.buffer[position : position + 1] != closer:
                    closers.append(closer)
                    if closer == b"}":
                        position = self.name_end(position)
                    continue  # the container's first value
                position += 1
            elif kind in ("string", "number", "literal"):
                position = end
            else:
                raise self.fail(position, "expected a value")
            while closers:  # after a value: the next one, or the container's end
                position = self.space(position)
                following = self.buffer[position : position + 1]
                if following == closers[-1]:
                    closers.pop()
                    position += 1
                    continue
                if following != b",":
                    raise self.fail(position, "expected ',' or a closing bracket")
                position += 1
                if closers[-1] == b"}":
                    position = self.name_end(position)
                break
            else:
                return position

    def name_end(self, position: int) -> int:
        """Past an object member's name and its colon, from ``position``."""
        position = self.space(position)
        colon = self.space(self.string_end(position))
        if self.buffer[colon : colon + 1] != b":":
            raise self.fail(colon, "expected ':'")
        return colon + 1

    def space(self, position: int) -> int:
        match = _WHITESPACE.match(self.buffer, position)
        assert match is not None  # it matches the empty string
        return match.end()

    def token(self, position: int) -> tuple[str, int]:
        """The kind of the token at ``position`` (a group of ``_TOKEN``, or "string"), and
        where it ends."""
        if self.buffer[position : position + 1] == b'"':
            return "string", self.string_end(position)
        match = _TOKEN.match(self.buffer, position)
        if match is None or match.lastgroup is None:
            raise self.fail(position)
        return match.lastgroup, match.end()

    def string_end(self, position: int) -> int:
        """Where the string opening at ``position`` ends, checked as ``json`` checks it."""
        if self.buffer[position : position + 1] != b'"':
            raise self.fail(position, "expected a string")
        size = len(self.buffer)
        start = position + 1
        while True:
            end = min(start + _STRING_STEP, size)
            if end < size:
                cut = _PIECE_END.search(self.buffer, end)
                end = cut.end() if cut is not None else size
            # At ``start - 1``; a piece that is not the last is closed with a quote of ours.
            piece = '"' + str(self.view[start:end], "latin-1") + ('"' if end < size else "")
            try:
                closed = _DECODER.raw_decode(piece)[1]
            except json.JSONDecodeError as exc:
                raise self.fail(start - 1 + exc.pos, exc.msg[:1].lower() + exc.msg[1:]) from None
            if end < size and closed == len(piece):  # ours: the string goes on
                start = end
                continue
            return start - 1 + closed

    def decode(self, start: int, end: int) -> Any:
        """The value in ``[start, end)``, parsed (its syntax is checked already)."""
        return json_load(str(self.view[start:end], "utf-8"), storable_only=False)

    def fail(self, position: int, why: str = "unexpected data") -> ParseError:
        return ParseError(f"The body is not valid JSON: {why} at byte {position}.")
