"""The checks before any server starts are one ordered list (``serve/startup_checks.CHECKS``)
that ``check``, ``make-dag`` and ``serve`` share: with several things broken at once, each
command exits with the same first failing check's code, and reordering the list reorders all
of them. ``make-dag`` stops there; ``check`` goes on to every later check that does not need
a failed one and prints each problem as the line it prints alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from offline_iaas import cli
from offline_iaas.config import load_config
from offline_iaas.errors import DataError, ModelError, exit_code
from offline_iaas.serve import startup_checks
from offline_iaas.serve.startup_checks import CHECKS, Checking, run_checks
from tests.error_catalogue import documented

L_FILE = "L-L1_SYNTH-1262304016-16.gwf"
L_STRAIN = "L1:GDS-CALIB_STRAIN"


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    """The small campaign (classifier mode), its frames and its model repository."""
    return small_campaign_dir()


def _broken_twice(base: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the campaign run as BBHnet with an injection list that does not exist and
    the classifier's repository (which does not fit): two checks fail."""
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    sets = ["--set", 'model.mode="bbhnet"',
            "--set", f'search.injections="{ws / "nowhere.json"}"']
    return ws, sets


def _error_lines(stderr: str, command: str) -> list[str]:
    """The lines of ``stderr`` that begin an error (``offline-iaas <command>: error: ``)."""
    return [line for line in stderr.splitlines()
            if line.startswith(f"offline-iaas {command}: error: ")]


def _exits(ws: Path, sets: list[str], capsys: pytest.CaptureFixture[str]
           ) -> dict[str, tuple[int, list[str]]]:
    """Exit code and error lines of ``check`` and ``make-dag`` through the CLI."""
    found = {}
    for command, extra in (("check", []), ("make-dag", ["--out", str(ws / "run")])):
        code = cli.main([command, str(ws / "campaign.toml"), *sets, *extra])
        found[command] = (code, _error_lines(capsys.readouterr().err, command))
    return found


def test_check_and_make_dag_exit_with_the_same_first_failing_check(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws, sets = _broken_twice(base, tmp_path)
    found = _exits(ws, sets, capsys)
    for command, (code, lines) in found.items():
        assert code == 2, (command, lines)  # the injection list, before the repository
        assert "search.injections" in lines[0] and "nowhere.json" in lines[0], (command, lines)
    assert len(found["make-dag"][1]) == 1  # make-dag stops there
    assert "exported for mode 'classifier'" in found["check"][1][1]  # check goes on
    assert len(found["check"][1]) == 2
    assert not (ws / "run").exists()

    (ws / "frames" / "H-H1_SYNTH-1262304032-16.gwf").unlink()  # the frames come first
    found = _exits(ws, sets, capsys)
    for command, (code, lines) in found.items():
        assert code == 3, (command, lines)
        assert "no frame data for observatory H" in lines[0], (command, lines)
    assert len(found["make-dag"][1]) == 1
    # the injection list needs the frames' span: skipped, not a second message
    assert len(found["check"][1]) == 2 and "exported for mode" in found["check"][1][1]
    assert not (ws / "run").exists()


def _without_channel(path: Path, channel: str) -> None:
    """Rewrite the GWF file ``path`` without ``channel`` (a frame file missing a channel)."""
    from gwpy.io.gwf import get_channel_names
    from gwpy.timeseries import TimeSeriesDict

    names = [name for name in get_channel_names(str(path)) if name != channel]
    TimeSeriesDict.read(path, names, format="gwf").write(path, format="gwf")


def test_check_lists_a_frame_problem_and_a_repository_mismatch_exiting_with_the_first_code(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A frame file without the L1 strain and a repository exported for 256 Hz read at
    128 Hz: check prints both problems, each as alone, and exits 3 (the frames, first);
    the control, with the file whole again, prints the repository's alone and exits 4."""
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    frame = ws / "frames" / L_FILE
    _without_channel(frame, L_STRAIN)
    args = ["check", str(ws / "campaign.toml"), "--set", "data.sample_rate=128"]
    prefix = "offline-iaas check: error: "
    repository = f"{prefix}3 problems with the model repository {ws / 'model-repository'}:"

    code = cli.main(args)
    err = capsys.readouterr().err
    lines = _error_lines(err, "check")
    assert code == exit_code(DataError), err
    assert len(lines) == 2, err
    assert lines[0].startswith(f"{prefix}the frame data for [1262304000, 1262304064)")
    assert f"channel {L_STRAIN} not found in {frame} covering" in lines[0]
    assert lines[1] == repository
    assert "exported for 256 Hz, the campaign reads 128 Hz (data.sample_rate)" in err
    message = err[err.index(prefix) + len(prefix):]
    documented("frames-and-repository", message, {ws: "<ws>"}, exit_code=code)
    # make-dag stops at the first
    code = cli.main(["make-dag", *args[1:], "--out", str(ws / "run")])
    assert code == exit_code(DataError)
    assert _error_lines(capsys.readouterr().err, "make-dag")[0] == \
        lines[0].replace("check:", "make-dag:", 1)
    assert not (ws / "run").exists()

    shutil.copyfile(base / "frames" / L_FILE, frame)  # the control: the frames whole
    code = cli.main(args)
    err = capsys.readouterr().err
    assert code == exit_code(ModelError), err
    assert _error_lines(err, "check") == [repository]
    assert "frame data" not in err


def test_serve_runs_the_shared_repository_check(base: Path, tmp_path: Path) -> None:
    ws, sets = _broken_twice(base, tmp_path)
    config = load_config(ws / "campaign.toml", [sets[1], sets[3]])
    with pytest.raises(ModelError, match="exported for mode 'classifier'"):
        run_checks(Checking("serve", config))  # serve has no injection list to read


def test_reordering_the_list_reorders_every_command(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    names = [check.name for check in CHECKS]
    assert names.index("injections") < names.index("repository")
    swapped = list(CHECKS)
    i, r = names.index("injections"), names.index("repository")
    swapped[i], swapped[r] = swapped[r], swapped[i]
    monkeypatch.setattr(startup_checks, "CHECKS", tuple(swapped))
    ws, sets = _broken_twice(base, tmp_path)
    for command, (code, lines) in _exits(ws, sets, capsys).items():
        assert code == 4, (command, lines)  # the repository, now first
        assert "exported for mode 'classifier'" in lines[0], (command, lines)


def test_an_unknown_command_has_no_checks(base: Path) -> None:
    with pytest.raises(ValueError, match="no checks for command 'merge'"):
        run_checks(Checking("merge", load_config(base / "campaign.toml")))
