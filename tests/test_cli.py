"""The command line: bad input gets one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from tests.error_catalogue import cli_error, documented
from tests.helpers import SMALL_CAMPAIGN


def offline_iaas(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def frames_config(small_config_file: Path) -> Path:
    write_synthetic_dataset(load_config(small_config_file))
    return small_config_file


def test_unknown_config_key(small_config_file: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag", small_config_file, "--set", "data.colour=red", "--out", tmp_path / "run"
    )
    assert_one_line_error(result, "unknown key 'data.colour'", str(small_config_file))
    assert result.returncode == 2
    assert not (tmp_path / "run").exists()


def test_zero_servers(small_config_file: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag", small_config_file, "--set", "layout.servers=0", "--out", tmp_path / "run"
    )
    assert_one_line_error(result, "'layout.servers' must be at least 1")
    assert result.returncode == 2


def test_frame_directory_without_frames(small_config_file: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = offline_iaas(
        "make-dag", small_config_file, "--set", f'data.frames="{empty}"', "--out", tmp_path / "run"
    )
    assert_one_line_error(result, str(empty))
    assert result.returncode == 3
    assert not (tmp_path / "run").exists()


def test_channel_not_in_frames(frames_config: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag",
        frames_config,
        "--set",
        'data.channels=["H1:GDS-CALIB_STRAIN", "L1:NO-SUCH_CHANNEL"]',
        "--out",
        tmp_path / "run",
    )
    assert_one_line_error(result, "L1:NO-SUCH_CHANNEL")
    assert result.returncode == 3
    assert not (tmp_path / "run").exists()


def test_run_local_on_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = offline_iaas("run-local", tmp_path)
    assert_one_line_error(result, str(tmp_path))


@pytest.mark.parametrize("name", ["ref.json", "campaign.toml"])
def test_reference_refuses_an_out_that_is_not_hdf5_and_overwrites_nothing(
        small_config_file: Path, name: str) -> None:
    """reference --out ref.json ended as its own 2-byte summary (the HDF5 result lost),
    --out campaign.toml replaced the config with HDF5: refused before anything runs."""
    out = small_config_file.parent / name
    if not out.exists():
        out.write_text("an earlier reference's summary, kept")
    before = {p.name: p.read_bytes() for p in small_config_file.parent.iterdir()}
    result = offline_iaas("reference", small_config_file, "--out", out)
    assert_one_line_error(result, f"reference --out {out}: must end in .h5 or .hdf5")
    assert result.returncode == 2
    assert {p.name: p.read_bytes() for p in small_config_file.parent.iterdir()} == before
    if name == "ref.json":
        documented("reference-out-not-hdf5", cli_error(result.stderr), {out: "<ws>/ref.json"},
                   exit_code=2)


NODE_COMMANDS = {
    "merge": ["merge", "--run-dir", "{run}"],
    "merge-shard": ["merge-shard", "--run-dir", "{run}", "--node", "shard0"],
    "prescript": ["prescript", "--run-dir", "{run}", "--node", "client0"],
    "client": ["client", "--run-dir", "{run}", "--node", "client0"],
    "serve": ["serve", "--run-dir", "{run}", "--node", "server0"],
    "status": ["status", "{run}"],
    "run-local": ["run-local", "{run}"],
    "report": ["report", "{run}"],
    "plan-from-run": ["plan", "{config}", "--target-hours", "1", "--from-run", "{run}"],
    "plan-simulate": ["plan", "{config}", "--simulate", "{run}", "--from-run", "{run}"],
}


@pytest.mark.parametrize("args", NODE_COMMANDS.values(), ids=NODE_COMMANDS.keys())
def test_every_command_of_a_run_directory_names_a_path_that_is_none(
        args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A mistyped run directory: exit 6 and the one "not a run directory" line, whatever the
    command (not the config exit code and a campaign.toml not found), and nothing made."""
    from offline_iaas.cli import main

    config = tmp_path / "campaign.toml"
    config.write_text(SMALL_CAMPAIGN)
    run = tmp_path / "runn"
    argv = [a.format(run=run, config=config) for a in args]
    capsys.readouterr()
    assert main(argv) == 6
    assert capsys.readouterr().err.strip().splitlines() == [
        f"offline-iaas {argv[0]}: error: {run} holds no offline.dag (not a run directory: "
        "write one with offline-iaas make-dag)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml"]


@pytest.mark.parametrize("command", ["make-dag", "train-demo", "synth"])
def test_an_output_directory_that_is_a_file_is_refused_before_any_work(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--out`` naming a file (the campaign's own config for synth): exit 6, one line naming
    it, before any planning, training or synthesis; the file and the directory as they were."""
    from offline_iaas.cli import main

    config = tmp_path / "campaign.toml"
    config.write_text(SMALL_CAMPAIGN)
    out = config if command == "synth" else tmp_path / "out"
    if out != config:
        out.write_bytes(b"not a directory")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert main([command, str(config), "--out", str(out)]) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"offline-iaas {command}: error: {out} is a file, not a directory"], err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    documented("output-directory-is-a-file", cli_error(err[0]), {out: "<ws>/out"}, exit_code=6)


def test_inspect_of_a_directory_says_it_is_one(tmp_path: Path, capsys) -> None:
    (tmp_path / "frames").mkdir()
    assert main(["inspect", str(tmp_path / "frames")]) == 3
    assert cli_error(capsys.readouterr().err) == (
        f"product file {tmp_path / 'frames'} is a directory, not a regular file (a product is "
        "a cleaned GWF file or a campaign HDF5 file)")


def test_inspect_of_a_client_part_says_what_it_is_and_where_the_provenance_is(
        small_campaign_dir, capsys) -> None:
    """A part (written by offline-iaas, without provenance) was called "not written by
    offline-iaas"; an HDF5 file of someone else's still is (the control)."""
    import h5py

    from tests.bad_input_cases import fake_parts, run_dir

    run = run_dir(small_campaign_dir())
    fake_parts(run)
    part = run / "parts" / "client0.h5"
    assert main(["inspect", str(part)]) == 3
    message = cli_error(capsys.readouterr().err)
    assert message == (f"{part}: client0's part of a run, not a product: the merge writes "
                       "the campaign's provenance into the run's output/campaign.h5")
    documented("inspect-part", message, {run: "<run>"}, exit_code=3)
    with h5py.File(run / "other.h5", "w") as other:
        other.attrs["nodes"] = "client0"
    assert main(["inspect", str(run / "other.h5")]) == 3
    assert cli_error(capsys.readouterr().err).endswith("(not written by offline-iaas)")


@pytest.mark.parametrize("option", ["--dag-status", "--failed-count"])
def test_the_final_node_refuses_a_negative_dagman_count_and_writes_no_summary(
        small_campaign_dir, option: str, capsys) -> None:
    """DAGMan's $(DAG_STATUS) and $(FAILED_COUNT) are 0 or more: a negative one was written
    into summary.json. argparse's one line naming the option, exit 2, nothing written."""
    from tests.bad_input_cases import run_dir

    run = run_dir(small_campaign_dir())
    with pytest.raises(SystemExit) as refused:
        main(["status", str(run), "--final", option, "-3"])
    assert refused.value.code == 2
    assert f"argument {option}: must be 0 or more, got -3" in capsys.readouterr().err
    assert not (run / "summary.json").exists()
