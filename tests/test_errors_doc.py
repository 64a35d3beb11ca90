"""docs/errors.md's catalogue is checked against the real messages (``tests/error_catalogue``):
every row is one whole message that a named test produces and compares."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.error_catalogue import (
    DOC,
    HEADER,
    WRITE_ENV,
    documented,
    quote,
    read_rows,
    rows_by_id,
    split_row,
    unquote,
)

TESTS = Path(__file__).resolve().parent


def _documenting_modules() -> dict[Path, ast.Module]:
    """The test modules that call ``documented``."""
    found = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "documented"
               for n in ast.walk(tree)):
            found[path] = tree
    return found


def test_every_row_is_one_whole_message() -> None:
    rows = rows_by_id(DOC.read_text())
    assert len(rows) > 50
    for row in rows.values():
        assert row.message.strip() and row.message != "?", row.id
        assert quote(row.message) == row.cells["message"], row.id  # nothing around the span


def test_every_table_of_messages_is_a_checked_catalogue() -> None:
    """A table with a ``message`` column must have the catalogue's columns (so it is read)."""
    headers = [split_row(line) for line in DOC.read_text().splitlines()
               if line.startswith("|") and "message" in split_row(line)]
    assert headers and all(tuple(h) == HEADER for h in headers), headers


def test_every_row_names_a_test_that_documents_it() -> None:
    modules = _documenting_modules()
    literals = {path: {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                       and isinstance(n.value, str)} for path, tree in modules.items()}
    functions = {path: {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
                 for path, tree in modules.items()}
    missing = []
    for row in read_rows(DOC.read_text()):
        named = set(re.findall(r"test_\w+", row.cells["test"]))
        if not any(row.id in literals[p] and named & functions[p] for p in modules):
            missing.append(f"{row.id} ({row.cells['test']})")
    assert missing == [], "rows no test documents (call tests.error_catalogue.documented)"


# ---- negative controls: the comparison is whole, exact and names the test ---------------------

MESSAGE = "<ws>/c.toml: 'data.duration' must be positive, got -64.0"
TEST = "`test_the_comparison_is_whole_and_exact`, `test_writing_mode_fills_in_the_message`"
DOCUMENT = f"""# t

| id | case | command | exit | message | test |
| --- | --- | --- | --- | --- | --- |
| negative-duration | a case | `cmd` | 2 | {quote(MESSAGE)} | {TEST} |
| piped | a case | `cmd` | — | {quote("a | b ⏎ second line")} | `test_x` |
"""


@pytest.fixture
def doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(WRITE_ENV, raising=False)
    path = tmp_path / "errors.md"
    path.write_text(DOCUMENT)
    return path


def test_the_comparison_is_whole_and_exact(doc: Path, tmp_path: Path) -> None:
    got = MESSAGE.replace("<ws>", str(tmp_path))
    documented("negative-duration", got, {tmp_path: "<ws>"}, exit_code=2, doc=doc)
    for wrong in (got[:-1], got + " s", got.replace("-64.0", "-64.1")):
        with pytest.raises(AssertionError, match="replace the row with"):
            documented("negative-duration", wrong, {tmp_path: "<ws>"}, doc=doc)
    with pytest.raises(AssertionError, match="replace the row with"):  # no placeholder
        documented("negative-duration", got, doc=doc)
    with pytest.raises(AssertionError, match="exit 2, the test got 3"):
        documented("negative-duration", got, {tmp_path: "<ws>"}, exit_code=3, doc=doc)


def test_a_row_must_name_the_test_that_documents_it(doc: Path) -> None:
    with pytest.raises(AssertionError, match="does not name test_a_row_must_name"):
        documented("piped", "a | b\nsecond line", doc=doc)


def test_a_missing_row_prints_the_line_to_paste(doc: Path) -> None:
    with pytest.raises(AssertionError) as caught:
        documented("new-case", "something broke: /x", {"/x": "F"}, exit_code=3, doc=doc)
    assert caught.value.args[0].splitlines()[-1] == (
        "| new-case | <the case> | `<the command>` | 3 | `something broke: F` | "
        "`test_a_missing_row_prints_the_line_to_paste` |")


def test_writing_mode_fills_in_the_message(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WRITE_ENV, "1")
    documented("negative-duration", "another message", exit_code=2, doc=doc)
    assert rows_by_id(doc.read_text())["negative-duration"].message == "another message"
    assert doc.read_text().replace("another message", MESSAGE) == DOCUMENT


def test_cells_keep_pipes_line_breaks_and_backticks() -> None:
    for message in ("a | b\nc", "uses `code` here", "plain"):
        assert unquote(quote(message)) == message
    (row,) = [r for r in read_rows(DOCUMENT) if r.id == "piped"]
    assert row.message == "a | b\nsecond line"
