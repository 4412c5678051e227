"""Code shape: no product function over 60 lines and no product file over 600 lines.

A ratchet: ``DATA_TABLES`` names the places allowed to be long for good (none yet); ``KNOWN_DEBT``
lists what is still over the limits today, to be split (issue #13). The test fails on any new
offender, and also when a listed one has been mended but is still listed, so the list only
shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
PACKAGE = PROJECT / "nodewright"
FUNCTION_LIMIT = 60
FILE_LIMIT = 600

DATA_TABLES: frozenset[str] = frozenset()
"""Declarative data allowed past the limits (each with a comment saying why). None today."""

KNOWN_DEBT: frozenset[str] = frozenset()
"""Over the limits today; split them and delete their lines here (issue #13)."""


def _functions(node: ast.AST, prefix: str) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
            found += _functions(child, f"{name}.")
        elif isinstance(child, ast.ClassDef):
            found += _functions(child, f"{prefix}{child.name}.")
    return found


def offenders() -> dict[str, int]:
    """Every product file over FILE_LIMIT lines and function over FUNCTION_LIMIT, with its size."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        relative = path.relative_to(PROJECT).as_posix()
        lines = text.count("\n")
        if lines > FILE_LIMIT:
            found[relative] = lines
        for name, length in _functions(ast.parse(text), ""):
            if length > FUNCTION_LIMIT:
                found[f"{relative}::{name}"] = length
    return found


def test_no_new_long_function_or_file() -> None:
    """Nothing outside the data tables and the listed debt is over the limits."""
    new = {place: size for place, size in offenders().items() if place not in DATA_TABLES | KNOWN_DEBT}
    assert not new, f"over {FUNCTION_LIMIT} lines per function / {FILE_LIMIT} per file: {new}"


def test_the_debt_list_only_shrinks() -> None:
    """A listed place that is now within the limits (or gone) must leave the list."""
    mended = sorted(KNOWN_DEBT - set(offenders()))
    assert not mended, f"within the limits now, remove from KNOWN_DEBT: {mended}"


def test_the_checker_sees_a_long_function(tmp_path: Path) -> None:
    """The measure itself: a 61-line function is reported with its qualified name."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = f"class Big:\n    def method(self) -> None:\n{body.replace('    ', '        ')}\n"
    names = dict(_functions(ast.parse(source), ""))
    assert names["Big.method"] == 61
