"""``RunDir``: the run directory's layout."""

from __future__ import annotations

from pathlib import Path

from offline_iaas.rundir import RunDir, is_shard_node


def test_every_node_has_its_files_under_the_run_directory(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.part("client0") == (tmp_path / "parts" / "client0.h5",
                                   tmp_path / "parts" / "client0.json")
    assert run.shard_output("shard3") == (tmp_path / "output" / "shards" / "shard3.h5",
                                          tmp_path / "output" / "shards" / "shard3.json")
    assert run.output == (tmp_path / "output" / "campaign.h5",
                          tmp_path / "output" / "campaign.json")
    assert run.job("client0") == tmp_path / "jobs" / "client0.json"
    assert is_shard_node("shard12") and not is_shard_node("shardy") and not is_shard_node("merge")
