"""Source hashes of variants, and pins: editing a kernel's comments or docstrings keeps its rows current.

Every measurement stores its variant's ``source_hash`` (a hash of the full text of the variant's source
files), and the fit reads only rows whose hash is the current one. That is right for a code change and
wrong for a comment: rewording a docstring would retire rows of every GPU, among them rows that cannot
be measured again (no such GPU lent). So ``source_pins.json`` keeps, per variant, the hash its rows
carry (``recorded``) with a hash of its *code* (``content``: Python without docstrings, as the AST sees
it; CUDA C++ without comments, whitespace collapsed). While a variant's code hashes to its pin's
``content``, ``Variant.source_hash`` answers the pinned ``recorded`` hash; once the code changes, the
full-text hash again, and the rows retire as they must.

A pin may also list ``also_recorded``: the full-text hashes a host recorded the pinned code under where
its pin check failed (the H100 domain sweep of 2026-11-25/26 on Python 3.12, whose ``ast.dump``
differed). ``Variant.current_hashes`` counts them while the code matches the pin, so a later edit of
comments or of a pinned variant's code that is re-pinned keeps those rows current too.

``python scripts/pin_sources.py`` pins every variant as it is now (run it only when the recorded rows
are of the current code, that is before editing comments); ``--drop NAME`` forgets a variant's pin.
``tests/kernels/test_source_pins.py`` fails when a pinned variant's code no longer matches its pin, so a
code change is a decision to retire its rows (drop the pin), never an accident. Imports nothing of
``kernels`` (``kernels.base`` imports it).
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable

PINS_PATH = Path(__file__).with_name("source_pins.json")
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def hash_text(*parts: str) -> str:
    import hashlib  # here, not at the top: kernels.base imports this module on select_kernel's path

    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def hash_files(paths: Iterable[Path]) -> str:
    """The full-text hash of ``paths`` (what a measurement's ``source_hash`` is, pins aside)."""
    return hash_text(*(Path(p).read_text() for p in paths))


def code_text(path: Path) -> str:
    """The text of ``path`` that defines code: Python as its AST without docstrings, CUDA C++ / other
    text without ``//`` and ``/* */`` comments, runs of whitespace as one space."""
    text = Path(path).read_text()
    if Path(path).suffix == ".py":
        import ast  # here: the lookup path imports this module and never hashes

        tree = ast.parse(text)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        return _stable_dump(tree)
    return " ".join(_C_COMMENT.sub(" ", text).split())


def _stable_dump(node: object) -> str:
    """An AST as text that does not depend on the Python version reading it, as ``ast.dump`` does:
    fields that are None or empty lists are left out (3.12 added ``type_params=[]`` to every
    function and class, 3.13's dump omits empty fields). A device on Python 3.12 once recorded a pinned
    Triton variant's rows under its full-text hash because its ``ast.dump`` differed from the pin's."""
    import ast

    if isinstance(node, ast.AST):
        fields = [f"{name}={_stable_dump(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_stable_dump(item) for item in node)}]"
    return repr(node)


def content_hash(paths: Iterable[Path]) -> str:
    return hash_text(*(code_text(p) for p in paths))


@lru_cache(maxsize=1)
def pins() -> dict[str, dict[str, str]]:
    return json.loads(PINS_PATH.read_text()) if PINS_PATH.exists() else {}


def pinned_hash(name: str, paths: list[Path]) -> str | None:
    """The recorded hash a variant's rows carry, if its code still matches its pin; else None."""
    pin = pins().get(name)
    if pin is None:
        return None
    return pin["recorded"] if content_hash(paths) == pin["content"] else None


def also_recorded(name: str, paths: list[Path]) -> tuple[str, ...]:
    """The pin's ``also_recorded`` hashes while the code matches it (else none): full-text hashes
    under which a host whose pin check failed recorded rows of the pinned code. A full-text hash
    names today's code only until the next edit of a comment or of host code; kept in the pin, such
    rows stay current as long as the rows under ``recorded`` do."""
    pin = pins().get(name)
    if pin is None or not pin.get("also_recorded"):
        return ()
    return tuple(pin["also_recorded"]) if content_hash(paths) == pin["content"] else ()
