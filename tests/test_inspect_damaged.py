"""``offline-iaas inspect`` of a damaged product: one line naming the file and exit code 3, never
a traceback or a hung command. A campaign file is probed in the frame reader's process (a byte
flipped where the HDF5 library crashes or loops), a frame file's checksums are checked by
LALFrame there too (a cut file, a byte changed with its mtime kept), the provenance must be a
JSON object in UTF-8, and a file is told apart by its first bytes, not its name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import pytest

from offline_iaas.cli import main
from offline_iaas.merge import provenance
from tests.error_catalogue import cli_error, documented
from tests.test_bad_input import H_FILE
from tests.test_report import make_fixture_run
from tests.test_report_damaged_output import DAMAGE, damage_cases


def inspected(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``inspect``'s exit code and its error's one line (or its printed provenance)."""
    code = main(["inspect", str(path)])
    out, err = capsys.readouterr()
    return code, (cli_error(err) if code else out)


@pytest.mark.parametrize("damage", damage_cases(list(DAMAGE)[1:]))
def test_a_campaign_file_the_hdf5_library_crashes_or_hangs_on_is_one_line(
        tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's damaged outputs (``test_report_damaged_output``): a byte where the HDF5
    library crashes, and one where it loops (inspect waited for ever)."""
    output = make_fixture_run(tmp_path) / "output" / "campaign.h5"
    code, line = inspected(output, capsys)  # control: intact, it reads (and has no provenance)
    assert (code, line) == (3, f"{output}: no provenance attribute (not written by "
                                "offline-iaas)")
    data = bytearray(output.read_bytes())
    data[int(damage.split()[1])] ^= 0xFF
    output.write_bytes(data)
    monkeypatch.setattr(provenance, "INSPECT_FLOOR_SECONDS", 4.0)  # its size rounds it up
    assert provenance.inspect_timeout_seconds(output.stat().st_size) == 5.0
    code, line = inspected(output, capsys)
    assert (code, line) == (3, f"{output}: not a readable HDF5 file: {DAMAGE[damage]}"), line
    if "hung" in DAMAGE[damage]:  # the row shows the timeout's name, not this test's 5 s
        documented("inspect-hdf5-hangs", line, {tmp_path: "<ws>", "5 s": "T s"},
                   exit_code=code)


@pytest.mark.parametrize(("attribute", "why"), [
    ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 "
                  "(char 1)"),
    ("[1, 2]", "a JSON list, not an object"),
    (5, "a int64, not text"),
    (b"{\"mer\xe7e_hash\": 1}", "not UTF-8 text"),
])
def test_a_provenance_attribute_that_is_no_json_object_is_one_line(
        tmp_path: Path, attribute, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "campaign.h5"
    with h5py.File(path, "w") as f:
        f.attrs["provenance"] = json.dumps({"merge_hash": "x"})
    assert inspected(path, capsys) == (0, '{\n  "merge_hash": "x"\n}\n')  # control
    with h5py.File(path, "a") as f:
        f.attrs["provenance"] = attribute
    code, line = inspected(path, capsys)
    assert (code, line) == (3, f"{path}: unreadable provenance attribute: {why}"), line
    if attribute == "[1, 2]":
        documented("inspect-provenance-not-an-object", line, {tmp_path: "<ws>"},
                   exit_code=code)


def test_a_frame_file_cut_or_changed_with_its_mtime_kept_is_not_intact(
        small_campaign_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LALFrame's checksums: a byte flipped in the data (the mtime kept, so no size or time
    tells it) and a file cut in half. The intact frame is read (a raw frame: no provenance,
    the control)."""
    frame = tmp_path / H_FILE
    shutil.copy(small_campaign_dir(export=False) / "frames" / H_FILE, frame)
    assert inspected(frame, capsys) == (3, f"{frame}: no offline-iaas frame history entry "
                                           "(not a cleaned frame written by offline-iaas)")
    data, stat = bytearray(frame.read_bytes()), frame.stat()
    data[len(data) // 2] ^= 0x01
    frame.write_bytes(data)
    os.utime(frame, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    code, line = inspected(frame, capsys)
    intact = (f"{frame}: not an intact GWF file: its checksums do not match its bytes (cut, "
              "or a byte changed since it was written)")
    assert (code, line) == (3, intact)
    documented("inspect-gwf-not-intact", line, {tmp_path: "<ws>"}, exit_code=code)
    frame.write_bytes(data[: len(data) // 2])
    assert inspected(frame, capsys) == (3, intact)


def test_a_product_is_told_by_its_first_bytes_and_a_file_that_is_no_file_is_named(
        small_campaign_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A frame file named ``.h5`` or ``.GWF`` is read as a frame file (it was "not a GWF or
    HDF5 file"); a device, a pipe, a link that leads nowhere and a missing file are named as
    what they are (they were "no such file"), in ``errors.not_a_regular_file``'s words, as
    every other reader names them (a missing one was "no such file", its own)."""
    source = small_campaign_dir(export=False) / "frames" / H_FILE
    for name in ("frame.h5", "FRAME.GWF"):
        shutil.copy(source, tmp_path / name)
        assert inspected(tmp_path / name, capsys)[1].endswith(
            ": no offline-iaas frame history entry (not a cleaned frame written by "
            "offline-iaas)")
    (tmp_path / "text.h5").write_text("[data]\n")
    assert inspected(tmp_path / "text.h5", capsys) == (
        3, f"{tmp_path / 'text.h5'}: not a GWF or HDF5 file (it starts with neither "
           "signature)")
    os.mkfifo(tmp_path / "pipe.h5")
    (tmp_path / "nowhere.gwf").symlink_to(tmp_path / "gone.gwf")
    kinds = "(a product is a cleaned GWF file or a campaign HDF5 file)"
    assert inspected(Path(os.devnull), capsys) == (
        3, f"product file {os.devnull} is a character device, not a regular file {kinds}")
    code, line = inspected(tmp_path / "pipe.h5", capsys)
    assert (code, line) == (3, f"product file {tmp_path / 'pipe.h5'} is a FIFO (named pipe), "
                               f"not a regular file {kinds}")
    documented("inspect-not-a-regular-file", line, {tmp_path: "<ws>"}, exit_code=code)
    assert inspected(tmp_path / "nowhere.gwf", capsys) == (
        3, f"product file {tmp_path / 'nowhere.gwf'} is a symbolic link that leads nowhere "
           f"{kinds}")
    assert inspected(tmp_path / "absent.gwf", capsys) == (
        3, f"product file {tmp_path / 'absent.gwf'} does not exist {kinds}")


def test_inspect_waits_longer_for_a_larger_product() -> None:
    """A good product of several GB on a slow filesystem takes longer than 30 s to read: the
    wait scales with its size (it was 30 s for any), a small one's is the floor (control)."""
    assert provenance.inspect_timeout_seconds(0) == provenance.INSPECT_FLOOR_SECONDS == 30.0
    assert provenance.inspect_timeout_seconds(100_000) == 31.0  # rounded up to whole seconds
    four_gib = 4 * 2**30
    assert provenance.inspect_timeout_seconds(four_gib) == 30.0 + 512.0  # at 8 MiB/s
    assert provenance.inspect_timeout_seconds(four_gib) > 30.0


def test_inspect_gives_the_reader_the_time_of_the_products_size(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign file of 4 GiB (its end sparse: the HDF5 library reads past none of it) is
    read with the size's time, not 30 s; the same file at its own size gets the floor's."""
    path = tmp_path / "campaign.h5"
    with h5py.File(path, "w") as f:
        f.attrs["provenance"] = json.dumps({"merge_hash": "x"})
    real = provenance.reader()
    waits: list[float] = []

    class Spy:
        def call(self, function, path, library, timeout_seconds):
            waits.append(timeout_seconds)
            return real.call(function, path, library, timeout_seconds)

    monkeypatch.setattr(provenance, "reader", Spy)
    assert inspected(path, capsys) == (0, '{\n  "merge_hash": "x"\n}\n')
    os.truncate(path, 4 * 2**30)
    assert inspected(path, capsys) == (0, '{\n  "merge_hash": "x"\n}\n')
    assert waits == [31.0, 30.0 + 512.0], waits
