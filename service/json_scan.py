"""An incremental reader of one JSON document from a binary file: containers are walked one member
at a time, and every other value is decoded by ``json``'s C scanner from a sliding text window, so
memory holds about one block plus the value at hand, whatever the document's size.

Strict where ``json`` is lenient: NaN, Infinity and -Infinity are refused, and so is a value nested
deeper than ``autotuner.records.exchange.MAX_NESTING_DEPTH`` (before it is decoded: ``json``'s
decoder recurses once a level, and thousands of levels end the process). A problem raises
:class:`JsonError` with its place (the keys and list indexes leading to it, pydantic-style).
"""
from __future__ import annotations

import codecs
import json
import re
from typing import IO, Any, Iterator

from autotuner.records.exchange import MAX_NESTING_DEPTH

BLOCK_BYTES = 1 << 20
MAX_VALUE_CHARS = 16 << 20  # a single scalar, or a container decoded whole, longer than this is refused
_WHITESPACE = " \t\n\r"
# An object holding no object or list: its end is found by one regular-expression match, without
# building its values (strings may hold braces, brackets and escaped quotes).
_FLAT_OBJECT = re.compile(r'\{(?:[^{}\[\]"]++|"(?:[^"\\]++|\\.)*+")*+\}', re.S)  # possessive: no backtracking
# What changes the nesting depth: a bracket outside strings (a string is matched whole, so the
# brackets inside it are skipped; an unclosed one at the window's end matches its quote alone).
_STRUCTURE = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}"]', re.S)


class JsonError(ValueError):
    def __init__(self, message: str, place: tuple[Any, ...]):
        super().__init__(message)
        self.message = message
        self.place = place


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (NaN and Infinity are refused)")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)


class JsonScanner:
    def __init__(self, handle: IO[bytes], block_bytes: int = BLOCK_BYTES):
        self.handle = handle
        self.block_bytes = block_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.eof = False

    def _more(self, place: tuple[Any, ...]) -> bool:
        """Append the next block (dropping what was consumed); False at the end of the file."""
        if self.eof:
            return False
        chunk = self.handle.read(self.block_bytes)
        try:
            decoded = self._decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise JsonError(f"Invalid JSON: the body is not UTF-8 ({exc.reason})", place) from None
        self.text = self.text[self.pos:] + decoded
        self.pos = 0
        self.eof = not chunk
        return True

    def peek(self, place: tuple[Any, ...]) -> str:
        """The next character that is not whitespace ("" at the end of the document)."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text) or not self._more(place):
                return text[pos] if pos < len(text) else ""

    def take(self, char: str, place: tuple[Any, ...], expected: str) -> None:
        if self.peek(place) != char:
            found = self.peek(place)
            raise JsonError(f"Invalid JSON: expected {expected}, found {found!r}" if found else
                            f"Invalid JSON: the document ends where {expected} should be", place)
        self.pos += 1

    def _depth_checked(self, place: tuple[Any, ...]) -> None:
        """Refuse the next value if it nests deeper than ``MAX_NESTING_DEPTH``; reads on until its end
        is in the window (or ``MAX_VALUE_CHARS`` are), so that the decoder never meets the depth."""
        if self.peek(place) not in ("[", "{"):
            return
        while True:
            depth = 0
            for token in _STRUCTURE.finditer(self.text, self.pos):
                char = token.group()
                if char in "[{":
                    depth += 1
                    if depth > MAX_NESTING_DEPTH:
                        raise JsonError(f"Invalid JSON: nested deeper than {MAX_NESTING_DEPTH} levels "
                                        "(rule nesting-depth)", place)
                elif char in "]}":
                    depth -= 1
                    if depth == 0:
                        return
                elif char == '"':
                    break  # a string cut by the window's end
            if len(self.text) - self.pos >= MAX_VALUE_CHARS or not self._more(place):
                return  # the decoder reports what is wrong with the rest

    def value(self, place: tuple[Any, ...]) -> tuple[Any, str]:
        """The next value, decoded, and its JSON text."""
        self._depth_checked(place)
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.text, self.pos)
            except ValueError as exc:
                if len(self.text) - self.pos < MAX_VALUE_CHARS and self._more(place):
                    continue  # perhaps cut by the window's end
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise JsonError(f"Invalid JSON: {reason}", place) from None
            if end == len(self.text) and self._more(place):
                continue  # a number or literal may go on in the next block
            raw = self.text[self.pos:end]
            self.pos = end
            return obj, raw

    def flat_text(self, place: tuple[Any, ...]) -> str:
        """The JSON text of the next value, not decoded where it is an object without containers (the
        caller validates it); any other value, or text that is not JSON, goes through :meth:`value`."""
        if self.peek(place) == "{":
            while True:
                found = _FLAT_OBJECT.match(self.text, self.pos)
                if found is not None:
                    self.pos = found.end()
                    return found.group()
                if len(self.text) - self.pos >= MAX_VALUE_CHARS or not self._more(place):
                    break
        return self.value(place)[1]

    def members(self, place: tuple[Any, ...]) -> Iterator[str]:
        """An object's keys, each with its ':' consumed (the caller reads the value). A key given twice
        is refused (a reader that keeps the last one would silently drop what the first one held)."""
        self.take("{", place, "an object")
        if self.peek(place) == "}":
            self.pos += 1
            return
        seen: set[str] = set()
        while True:
            key, _raw = self.value(place)
            if not isinstance(key, str):
                raise JsonError("Invalid JSON: an object's keys are strings", place)
            if key in seen:
                raise JsonError(f"Invalid JSON: key {key!r} appears twice", place)
            seen.add(key)
            self.take(":", (*place, key), "':'")
            yield key
            if self.peek(place) == ",":
                self.pos += 1
                continue
            self.take("}", place, "',' or '}'")
            return

    def items(self, place: tuple[Any, ...]) -> Iterator[int]:
        """A list's indexes (the caller reads each item)."""
        self.take("[", place, "a list")
        if self.peek(place) == "]":
            self.pos += 1
            return
        index = 0
        while True:
            yield index
            if self.peek(place) == ",":
                self.pos += 1
                index += 1
                continue
            self.take("]", place, "',' or ']'")
            return

    def end(self, place: tuple[Any, ...]) -> None:
        if self.peek(place):
            raise JsonError("Invalid JSON: text after the document", place)
