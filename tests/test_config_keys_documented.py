"""Every campaign-config key has its docstring where the user guide says keys are documented
(``config_sections.py``, each mode's ``settings.py``): the string right after the field."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCES = sorted([Path("src/offline_iaas/config_sections.py"),
                  *Path("src/offline_iaas/science").glob("*/settings.py")])


def undocumented_fields(source: str) -> list[str]:
    """``Class.field`` of each annotated field of a dataclass in ``source`` that no string
    statement follows."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or not any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list):
            continue
        body = node.body
        for index, statement in enumerate(body):
            if not (isinstance(statement, ast.AnnAssign)
                    and isinstance(statement.target, ast.Name)):
                continue
            after = body[index + 1] if index + 1 < len(body) else None
            if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                missing.append(f"{node.name}.{statement.target.id}")
    return missing


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name if p.name ==
                         "settings.py" else p.stem)
def test_every_config_key_has_its_docstring(path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    assert undocumented_fields((root / path).read_text()) == []


def test_a_field_without_its_docstring_is_found() -> None:
    """The control: a field followed by another field, and one at the end of its class."""
    source = ('from dataclasses import dataclass\n@dataclass\nclass S:\n    a: int = 1\n'
              '    """A."""\n    b: int = 2\n    c: int = 3\n')
    assert undocumented_fields(source) == ["S.b", "S.c"]
