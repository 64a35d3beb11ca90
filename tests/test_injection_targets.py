"""What ``convert-injections`` writes and over what: an existing target (a campaign's output,
another set, a dangling link) is refused unless ``--overwrite`` is given (both commands
replaced any file there with exit 0), and the options that stand in for what a file does not
say are refused naming the option when the reader would refuse them as the file's own
attribute (a NaN ``--f-lower-hz`` or a made-up ``--approximant`` was written, and the
written file then refused by this same command). ``draw-injections``' own target:
``tests/test_draw_injections.py``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.cli import main
from offline_iaas.errors import DataError
from offline_iaas.search.injection_file import read_injection_set, write_injection_set
from offline_iaas.search.injection_set import number_attribute
from tests.error_catalogue import cli_error, documented
from tests.injection_samples import sample_set
from tests.test_injections_aframe import aframe_file


def convert(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    """``convert-injections``' exit code and its error's one line ("" on success)."""
    code = main(["convert-injections", *map(str, args)])
    err = capsys.readouterr().err.strip()
    assert code == 0 or len(err.splitlines()) == 1, err
    return code, cli_error(err) if code else ""


def test_an_existing_target_is_refused_unless_overwrite_is_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign's HDF5 output at the target, and a dangling link: exit 2 naming the target
    and ``--overwrite``, each left as it was and no temporary file beside it. The control:
    with ``--overwrite`` the output is replaced by the set (the old behaviour, now asked
    for), and a new target needs no option."""
    source = tmp_path / "set.h5"
    write_injection_set(source, sample_set())
    campaign = tmp_path / "campaign.h5"
    with h5py.File(campaign, "w") as f:  # what the command replaced whole with exit 0
        f["scores"] = np.arange(10_000, dtype=np.float64)
    before = campaign.read_bytes()
    dangling = tmp_path / "gone.xml"
    dangling.symlink_to(tmp_path / "nowhere.xml")
    for target in (dangling, campaign):
        code, message = convert(capsys, source, target)
        assert (code, message) == (2, f"{target}: already exists (convert-injections would "
                                      "replace it): give another target, or --overwrite to "
                                      "replace it")
    documented("injection-output-exists", message, {tmp_path: "<ws>"}, exit_code=2)
    assert campaign.read_bytes() == before and os.path.islink(dangling)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.h5", "gone.xml", "set.h5"]
    # the control: asked for, the file is replaced; a new target is written as before
    assert convert(capsys, source, campaign, "--overwrite") == (0, "")
    assert len(read_injection_set(campaign)) == len(sample_set())
    assert convert(capsys, source, tmp_path / "new.xml.gz") == (0, "")
    assert len(read_injection_set(tmp_path / "new.xml.gz")) == len(sample_set())



OVER_SPECIAL_FILES = """
import contextlib, io, json, sys
from offline_iaas.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def test_a_fifo_at_the_target_is_refused_even_with_overwrite_and_a_link_is_replaced(
        tmp_path: Path) -> None:
    """A FIFO at the target with ``--overwrite``: both commands removed it and wrote the set
    in its place, exit 0 (checked on the old code), taking a pipe that something reads or
    writes; now exit 2 naming its kind, the FIFO left. A link is replaced itself, never
    followed (as ``atomic.replaced_atomically`` replaces a link at every writer's target): one
    to a FIFO is replaced by the set, the FIFO left as it was. Run in a child with a timeout
    (a FIFO opened would wait); the control: a regular file is replaced with ``--overwrite``."""
    source, fifo, link, plain = (tmp_path / name for name in
                                 ("set.h5", "pipe.xml", "link.h5", "plain.h5"))
    write_injection_set(source, sample_set())
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    plain.write_bytes(b"an old set")
    config = tmp_path / "campaign.toml"  # not read: the target is refused first
    cases = [["convert-injections", str(source), str(fifo), "--overwrite"],
             ["draw-injections", str(config), "--out", str(fifo), "--overwrite"],
             ["convert-injections", str(source), str(link), "--overwrite"],
             ["convert-injections", str(source), str(plain), "--overwrite"]]
    done = subprocess.run([sys.executable, "-c", OVER_SPECIAL_FILES, json.dumps(cases)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (fifo_code, fifo_err), (draw_code, draw_err), (link_code, _), (plain_code, _) = \
        json.loads(done.stdout.strip().splitlines()[-1])
    message = cli_error(fifo_err)
    assert (fifo_code, message) == (2, f"{fifo} is a FIFO (named pipe), not a regular file "
                                       "(convert-injections replaces only a regular file or a "
                                       "link, even with --overwrite): give another target")
    documented("injection-output-not-regular", message, {tmp_path: "<ws>"}, exit_code=2)
    assert (draw_code, cli_error(draw_err)) == (2, message.replace("convert-", "draw-"))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left as it was
    assert link_code == 0 and not link.is_symlink()  # the link replaced, not followed
    assert len(read_injection_set(link)) == len(sample_set())
    assert plain_code == 0 and len(read_injection_set(plain)) == len(sample_set())  # control


def test_a_directory_at_the_target_is_refused_before_anything_is_read_or_drawn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory at the target, with or without ``--overwrite``: the source was read (the
    set drawn) and then the write failed, exit 6 with the OS's words (checked on the old
    code); now exit 2 naming it and its kind before the source is read (draw-injections': its
    config is not there, and not read), the directory and its file left as they were. The
    control: a target beside it is written."""
    source, target = tmp_path / "set.h5", tmp_path / "out.h5"
    write_injection_set(source, sample_set())
    target.mkdir()
    (target / "kept").write_text("a file of the directory")
    config = tmp_path / "campaign.toml"  # not there: the target is refused first
    expected = (2, f"{target} is a directory, not a regular file (convert-injections replaces "
                   "only a regular file or a link, even with --overwrite): give another target")
    for overwrite in ([], ["--overwrite"]):
        assert convert(capsys, source, target, *overwrite) == expected
        code = main(["draw-injections", str(config), "--out", str(target), *overwrite])
        message = cli_error(capsys.readouterr().err.strip())
        assert (code, message) == (2, expected[1].replace("convert-", "draw-"))
    assert [p.name for p in target.iterdir()] == ["kept"]
    assert (target / "kept").read_text() == "a file of the directory"
    assert convert(capsys, source, tmp_path / "beside.h5") == (0, "")
    assert len(read_injection_set(tmp_path / "beside.h5")) == len(sample_set())

STAND_INS = {  # options -> (row id or None, the message)
    "approximant unknown": (["--approximant", "bogus"], "convert-injections-approximant",
                            "'--approximant' is not a lalsimulation approximant: 'bogus' "
                            "(e.g. IMRPhenomD, IMRPhenomXPHM, SEOBNRv4_ROM)"),
    "f_lower NaN": (["--f-lower-hz", "nan"], "convert-injections-frequency",
                    "--f-lower-hz must be a positive number of Hz, not nan"),
    "f_lower zero": (["--f-lower-hz", "0"], None,
                     "--f-lower-hz must be a positive number of Hz, not 0"),
    "reference negative": (["--reference-frequency-hz", "-5"], None,
                           "--reference-frequency-hz must be a positive number of Hz, not -5"),
    "reference infinite": (["--reference-frequency-hz", "inf"], None,
                           "--reference-frequency-hz must be a positive number of Hz, not inf"),
}
GOOD = {"--approximant": "IMRPhenomPv2", "--f-lower-hz": "20", "--reference-frequency-hz": "50"}


@pytest.mark.parametrize("case", STAND_INS)
def test_a_stand_in_option_the_reader_would_refuse_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    """aframe's file (no approximant, no frequencies) with one bad option among good ones:
    exit 2 naming the option, nothing written. The control: the good options convert it, and
    the written file reads back with no option at all; the bad frequency, as the file's own
    attribute, is refused by the reader (it was written, then refused: one rule for both)."""
    source, target = tmp_path / "waveforms.hdf5", tmp_path / "set.xml"
    aframe_file(source)
    bad, row, expected = STAND_INS[case]
    options = {**GOOD, bad[0]: bad[1]}
    code, message = convert(capsys, source, target, *(x for kv in options.items() for x in kv))
    assert (code, message) == (2, expected)
    if row is not None:
        documented(row, message, exit_code=2)
    assert not target.exists()
    assert convert(capsys, source, target, *(x for kv in GOOD.items() for x in kv)) == (0, "")
    back = read_injection_set(target)
    assert (back.approximant, back.f_lower_hz, back.reference_hz) == ("IMRPhenomPv2", 20.0, 50.0)
    if bad[0] != "--approximant":  # the negative control: the reader refuses it in a file
        with pytest.raises(DataError, match="'f_lower_hz' must be a positive number"):
            number_attribute(target, "f_lower_hz", float(bad[1]))

def test_a_device_link_as_the_source_is_named_not_found_no_more(tmp_path: Path) -> None:
    """A link to /dev/zero named as an injection file: one line saying it is a character
    device, exit 2, nothing written (the FIFO: ``tests/test_endless_inputs.py``). Run in a
    child with a timeout, as the device never ends; the control: a real file converts."""
    for name in ("zero.h5", "zero.xml.gz"):
        (tmp_path / name).symlink_to("/dev/zero")
        done = subprocess.run([sys.executable, "-m", "offline_iaas.cli", "convert-injections",
                               str(tmp_path / name), str(tmp_path / "out.xml")],
                              capture_output=True, text=True, timeout=120)
        assert (done.returncode, cli_error(done.stderr)) == (
            2, f"injection file {tmp_path / name} is a character device, not a regular file")
        assert not (tmp_path / "out.xml").exists()
    write_injection_set(tmp_path / "set.h5", sample_set())
    done = subprocess.run([sys.executable, "-m", "offline_iaas.cli", "convert-injections",
                           str(tmp_path / "set.h5"), str(tmp_path / "out.xml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
