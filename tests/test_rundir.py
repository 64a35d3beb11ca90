"""``RunDir``: the run directory's layout and when it says a node is complete."""

from __future__ import annotations

import json
from pathlib import Path

from offline_iaas.rundir import MERGE_NODE, RunDir


def test_a_client_is_complete_only_when_its_sidecar_says_so(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    data, sidecar = run.part("client0")
    assert (data, sidecar) == (tmp_path / "parts" / "client0.h5",
                               tmp_path / "parts" / "client0.json")
    assert not run.node_complete("client0")  # nothing written
    sidecar.parent.mkdir()
    sidecar.write_text("{not json")
    assert not run.node_complete("client0")
    sidecar.write_text(json.dumps({"complete": False}))
    assert not run.node_complete("client0")
    sidecar.write_text(json.dumps({"complete": True}))
    assert run.node_complete("client0")
    assert not run.node_complete("client1")


def test_the_merge_is_complete_with_its_output_and_a_complete_summary(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    data, summary = run.output
    summary.parent.mkdir()
    summary.write_text(json.dumps({"complete": True}))
    assert not run.node_complete(MERGE_NODE)  # no output file
    data.write_bytes(b"")
    assert run.node_complete(MERGE_NODE)
    summary.write_text(json.dumps({"complete": "yes"}))
    assert not run.node_complete(MERGE_NODE)


def test_run_id_is_empty_without_a_readable_run_info(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.run_id() == ""
    run.run_info.write_text("[1, 2]")
    assert run.run_id() == ""
    run.run_info.write_text(json.dumps({"run_id": "abc"}))
    assert run.run_id() == "abc"
