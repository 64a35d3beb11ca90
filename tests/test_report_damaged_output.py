"""The report of a run whose output is damaged (cut in half, or a byte flipped where the HDF5
library crashes or loops): one problem line naming the file, the page written, no section
failing on it. The output is probed in the frame reader's process (``GwfReader.call``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.data.gwf_reader import reader
from offline_iaas.report.build import write_report
from offline_iaas.rundir import RunDir
from tests.helpers import captured_log
from tests.test_report import make_fixture_run

# the fixture's output (the same bytes on every build) cut in half, or a byte flipped where
# the HDF5 library crashes or loops reading its metadata: what the report says of it
DAMAGE = {"truncated": "Unable to synchronously open file (truncated file",
          "byte 5865 flipped": "the HDF5 library crashed (SIGSEGV) reading it",
          "byte 8840 flipped": "the HDF5 library hung (killed after 5 s) reading it"}


def damage_cases(names: list[str]) -> list:
    """``names`` as parameters; the loop's marked slow: it spins a core for the reader's 5 s
    (``test_injection_file`` keeps a hang of the library in make check)."""
    return [pytest.param(name, marks=pytest.mark.slow) if "hung" in DAMAGE[name] else name
            for name in names]


@pytest.mark.parametrize("damage", damage_cases(list(DAMAGE)))
def test_a_damaged_output_is_one_problem_naming_the_file(
        tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = make_fixture_run(tmp_path)
    output = run_dir / "output" / "campaign.h5"
    with captured_log() as lines:  # control: the intact output is no problem
        write_report(RunDir(run_dir))
    assert lines == []
    data = bytearray(output.read_bytes())
    if damage == "truncated":
        del data[len(data) // 2:]
    else:
        data[int(damage.split()[1])] ^= 0xFF
    output.write_bytes(data)
    monkeypatch.setattr(reader(), "timeout_seconds", 5)  # the report's reader: started above
    with captured_log() as lines:
        text = write_report(RunDir(run_dir)).read_text()
    # one line, naming the file; no section failed reading it
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"report: {output}: not a readable HDF5 file: "), lines
    assert DAMAGE[damage] in lines[0] and lines[0].endswith("; run the merge again"), lines
    assert f"{output}: not a readable HDF5 file" in text
