"""``synth`` and ``train-demo`` write a synthetic dataset into ``data.frames``: never into a
directory of frames synth did not write (a detector's: same-named files were overwritten,
others got synthetic ones beside them), and ``train-demo`` names a damaged ``synth.json``
before any network trains (a traceback, or DeepClean's weights written and then a crash)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.data.synth import UNFINISHED, refuse_foreign_frames
from tests.error_catalogue import cli_error, documented
from tests.helpers import file_hashes


@pytest.fixture(scope="module")
def dataset(small_campaign_dir: Callable[..., Path]) -> Path:
    return small_campaign_dir(export=False)


def test_synth_and_train_demo_refuse_a_directory_of_frames_synth_did_not_write(
        dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(dataset, workspace)
    frames = workspace / "frames"
    (frames / "synth.json").unlink()  # a detector's frames: no summary of synth's beside them
    for path in frames.glob("*_SYNTH-*.gwf"):
        path.rename(path.with_name(path.name.replace("_SYNTH-", "_HOFT-")))
    before = file_hashes(workspace)
    said = []
    for command in (["synth", str(workspace / "campaign.toml")],
                    ["train-demo", str(workspace / "campaign.toml"), "--out",
                     str(workspace / "weights")]):
        code = main(command)
        [line] = capsys.readouterr().err.strip().splitlines()
        said.append((code, cli_error(line)))
    assert file_hashes(workspace) == before and not (workspace / "weights").exists()
    assert said[0] == said[1], said
    named = re.search(r"\((\S+\.gwf); ", said[0][1])  # the first the walk meets
    assert named is not None and Path(named[1]) in set(frames.rglob("*.gwf")), said
    documented("synth-into-foreign-frames", said[0][1],
               {named[1]: "<ws>/frames/<one of them>", frames: "<ws>/frames"},
               exit_code=said[0][0])
    # controls: synth's own directory (its synth.json), one it did not finish (killed after
    # its marker and some frames), and a new or empty one, are written
    refuse_foreign_frames(dataset / "frames")
    (frames / UNFINISHED).write_text("")
    refuse_foreign_frames(frames)
    refuse_foreign_frames(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    refuse_foreign_frames(tmp_path / "empty")


@pytest.mark.parametrize("text", ["{x", "[]", '{"injections": [{"gps_time": "noon"}]}',
                                  '{"injections": [{"gps_time": true}]}'])
def test_train_demo_names_a_damaged_synth_json_before_training(
        text: str, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(dataset, workspace)
    summary = workspace / "frames" / "synth.json"
    summary.write_text(text)
    code = main(["train-demo", str(workspace / "campaign.toml"), "--out",
                 str(workspace / "weights")])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and str(summary) in line and "Traceback" not in line
    assert not (workspace / "weights").exists() and summary.read_text() == text
    if text == "[]":
        documented("train-demo-synth-json-damaged", cli_error(line),
                   {summary: "<ws>/frames/synth.json"}, exit_code=code)


def test_train_demo_reads_synth_s_own_summary(dataset: Path) -> None:
    """The control of the refusals above: synth's summary is the dataset train-demo trains on
    (its injections' times, its directory)."""
    from offline_iaas.config import load_config
    from offline_iaas.models.training import _dataset

    summary = _dataset(load_config(dataset / "campaign.toml"))
    assert summary["injections"] and summary["directory"] == str((dataset / "frames").resolve())
