"""docs/errors.md's catalogue, checked against the messages the tests produce.

Each row of a catalogue table (header ``| id | case | command | exit | message | test |``) is
one message: ``message`` is one code span holding the whole message as the program gives it
(no ``offline-iaas <command>: error:`` prefix), with the test's own paths and numbers written
as placeholders (``<ws>``, ``C`` ...), a line break as `` ⏎ `` and ``|`` as ``\\|``. The test
that triggers the case passes what it got to ``documented(id, message, placeholders)``, which
fails unless the row says exactly that, whole, and names that test.

Adding a case: call ``documented("new-id", message, {path: "<ws>"})`` in its test and run it;
the failure prints the row to paste into docs/errors.md (fill in the case and the command).
When a message changes on purpose, ``make errors-doc`` (``OFFLINE_IAAS_WRITE_ERRORS_DOC=1``
with the tests) writes the new text into the rows that exist.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offline_iaas.errors import exit_code

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
HEADER = ("id", "case", "command", "exit", "message", "test")
WRITE_ENV = "OFFLINE_IAAS_WRITE_ERRORS_DOC"
"""Set (to anything), ``documented`` writes the message it got into an existing row."""
LINE_BREAK = " ⏎ "
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Row:
    """One catalogue row: its cells as written, and where it stands in the document."""

    cells: dict[str, str]
    line: int
    """0-based line number in the document."""

    @property
    def id(self) -> str:
        return self.cells["id"]

    @property
    def message(self) -> str:
        """The message the row documents (its code span, unescaped)."""
        return unquote(self.cells["message"])


def quote(message: str) -> str:
    """A message as a table cell: one code span, line breaks shown, ``|`` escaped."""
    text = message.replace("\n", LINE_BREAK).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def unquote(cell: str) -> str:
    """The message a cell's code span holds (``quote`` reversed)."""
    match = re.fullmatch(r"``\s(.*)\s``|`([^`]*)`", cell)
    if not match:
        raise AssertionError(f"{DOC}: message cell {cell!r} is not one code span")
    text = match.group(1) if match.group(1) is not None else match.group(2)
    return text.replace("\\|", "|").replace(LINE_BREAK, "\n")


def split_row(line: str) -> list[str]:
    """The cells of a table line (escaped ``\\|`` stays inside its cell)."""
    return [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]


def read_rows(text: str) -> list[Row]:
    """Every row of every catalogue table in ``text`` (tables with ``HEADER``)."""
    rows: list[Row] = []
    in_table = False
    for number, line in enumerate(text.splitlines()):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = split_row(line)
        if tuple(cells) == HEADER:
            in_table = True
        elif in_table and not set("".join(cells)) <= set("-: "):
            if len(cells) != len(HEADER):
                raise AssertionError(f"{DOC}:{number + 1}: {len(cells)} cells, not "
                                     f"{len(HEADER)} ({' | '.join(HEADER)})")
            rows.append(Row(dict(zip(HEADER, cells, strict=True)), number))
    return rows


def rows_by_id(text: str) -> dict[str, Row]:
    rows = read_rows(text)
    ids = [r.id for r in rows]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise AssertionError(f"{DOC}: ids used by more than one row: {repeated}")
    return {r.id: r for r in rows}


def with_placeholders(message: str, placeholders: dict[str, str]) -> str:
    """``message`` with each placeholder's text replaced (longest first)."""
    for text in sorted(placeholders, key=len, reverse=True):
        message = message.replace(text, placeholders[text])
    return message


def current_test() -> str:
    """The running test's function name (pytest sets ``PYTEST_CURRENT_TEST``)."""
    node = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    return node.split("::")[-1].split("[")[0]


def documented(row_id: str, message: str, placeholders: dict[str | Path, str] | None = None,
               *, exit_code: int | None = None, doc: Path = DOC) -> None:
    """Fail unless row ``row_id`` of docs/errors.md documents ``message`` whole.

    Parameters
    ----------
    row_id
        The row's ``id`` cell.
    message
        What the program said (the exception's text, or stderr without the CLI's prefix).
    placeholders
        Text of this run (a temporary path, a port, a config hash) → what the row shows.
    exit_code
        If given, the row's ``exit`` cell must be this number.
    """
    wanted = with_placeholders(message.strip(),
                               {str(k): v for k, v in (placeholders or {}).items()})
    text = doc.read_text()
    row = rows_by_id(text).get(row_id)
    test = current_test()
    if row is None:
        line = "| " + " | ".join([row_id, "<the case>", "`<the command>`",
                                  "—" if exit_code is None else str(exit_code), quote(wanted),
                                  f"`{test}`"]) + " |"
        raise AssertionError(f"{doc} has no row {row_id!r}; add it to the catalogue:\n{line}")
    cells = dict(row.cells, message=quote(wanted))
    if exit_code is not None:
        cells["exit"] = str(exit_code)
    line = "| " + " | ".join(cells[h] for h in HEADER) + " |"
    if cells != row.cells and os.environ.get(WRITE_ENV):
        lines = text.splitlines(keepends=True)
        lines[row.line] = line + "\n"
        doc.write_text("".join(lines))
        row = Row(cells, row.line)
    assert row.message == wanted, (
        f"{doc}, row {row_id!r} documents\n  {row.message!r}\nbut the test got\n  {wanted!r}\n"
        f"replace the row with (or run `make errors-doc`):\n{line}")
    assert exit_code is None or row.cells["exit"] == str(exit_code), (
        f"{doc}, row {row_id!r}: exit {row.cells['exit']}, the test got {exit_code}:\n{line}")
    assert not test or test in row.cells["test"], (
        f"{doc}, row {row_id!r}: its test cell {row.cells['test']} does not name {test}")


def documented_refusals(refusals: dict[str, Any], placeholders: dict[str | Path, str]) -> None:
    """``documented`` for each row id → ``pytest.raises`` of a refusal: its message, whole,
    and its error type's exit code."""
    for row_id, caught in refusals.items():
        assert "\n" not in str(caught.value), (row_id, str(caught.value))
        documented(row_id, str(caught.value), placeholders, exit_code=exit_code(caught.value))


def cli_error(stderr: str) -> str:
    """The message of the last ``offline-iaas <command>: error: ...`` in a command's stderr
    (a node's log holds its log lines before it)."""
    *_, message = re.split(r"^offline-iaas [\w-]+: error: ", stderr, flags=re.M)
    return message.strip()
