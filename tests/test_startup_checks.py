"""The checks before any server starts are one ordered list (``serve/startup_checks.CHECKS``)
that ``check``, ``make-dag`` and ``serve`` share: with several things broken at once, each
command stops at the same first failing check, and reordering the list reorders all of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from offline_iaas import cli
from offline_iaas.config import load_config
from offline_iaas.errors import ModelError
from offline_iaas.serve import startup_checks
from offline_iaas.serve.startup_checks import CHECKS, Checking, run_checks


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


def _exits(ws: Path, sets: list[str], capsys: pytest.CaptureFixture[str]
           ) -> dict[str, tuple[int, str]]:
    """Exit code and last stderr line of ``check`` and ``make-dag`` through the CLI."""
    found = {}
    for command, extra in (("check", []), ("make-dag", ["--out", str(ws / "run")])):
        code = cli.main([command, str(ws / "campaign.toml"), *sets, *extra])
        found[command] = (code, capsys.readouterr().err.strip().splitlines()[-1])
    return found


def test_check_and_make_dag_stop_at_the_same_first_failing_check(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws, sets = _broken_twice(base, tmp_path)
    for command, (code, line) in _exits(ws, sets, capsys).items():
        assert code == 2, (command, line)  # the injection list, before the repository
        assert "search.injections" in line and "nowhere.json" in line, (command, line)
    assert not (ws / "run").exists()

    (ws / "frames" / "H-H1_SYNTH-1262304032-16.gwf").unlink()  # the frames come first
    for command, (code, line) in _exits(ws, sets, capsys).items():
        assert code == 3, (command, line)
    assert not (ws / "run").exists()


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
    for command, (code, line) in _exits(ws, sets, capsys).items():
        assert code == 4, (command, line)  # the repository, now first
        assert "exported for mode 'classifier'" in line, (command, line)


def test_an_unknown_command_has_no_checks(base: Path) -> None:
    with pytest.raises(ValueError, match="no checks for command 'merge'"):
        run_checks(Checking("merge", load_config(base / "campaign.toml")))
