"""The hook client and its readers run on the agent's own interpreter, Python 3.9 or later.

``from __future__ import annotations`` keeps ``X | Y`` in annotations harmless there, but at
run time 3.9 has no union types (``isinstance(x, str | bytes)`` raises ``TypeError``) and no
``match`` statement. This test reads the code; it does not need a 3.9 interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HOOKS = Path(__file__).resolve().parent.parent / "hooks"
SOURCES = sorted(HOOKS.rglob("*.py"))


def _runtime_unions(tree: ast.AST) -> list[int]:
    """Lines where ``|`` builds a type at run time: isinstance/issubclass's second argument."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
            and isinstance(node.args[1], ast.BinOp)
            and isinstance(node.args[1].op, ast.BitOr)
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(HOOKS)) for p in SOURCES])
def test_hook_code_runs_on_python_39(path):
    tree = ast.parse(path.read_text(), feature_version=(3, 9))  # no match, no 3.10+ syntax
    assert _runtime_unions(tree) == [], f"{path.name}: isinstance with X | Y needs 3.10"
