"""``status`` of a run whose files were damaged or edited by hand (a bad-input hunt): a job
spec edited since make-dag is refused as the nodes refuse it, not counted into false totals; a
piece make-dag never plans is named (runs older than run.json's ``job_sha256`` too); ``--final``
of a copied run says why its output is not complete; run-local's state with an unknown status
is damaged (a node that ended before it started by a clock set back is not); DAGMan's node
status file that is a FIFO is not waited on; a MAXJOBS count beyond the config's bound is
refused with its line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import config_from_dict, load_config
from offline_iaas.errors import RunError
from offline_iaas.job_specs import piece_damage
from offline_iaas.local_state import local_state_text
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import client_shares, make_stretches, piece_off_its_stretch
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import final_summary, read_status
from tests import helpers
from tests.error_catalogue import cli_error, documented
from tests.test_status import complete_part, finish, local_state, planned_run


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    helpers.skip_data_check(monkeypatch)
    return planned_run(tmp_path, servers=1)


def edit_spec(run: Path, node: str, **fields: int) -> None:
    """Set fields of the first piece of ``node``'s job spec, as by hand."""
    path = run / "jobs" / f"{node}.json"
    spec = json.loads(path.read_text())
    spec["pieces"][0].update(fields)
    path.write_text(json.dumps(spec, indent=1))


def status_error(run: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["status", str(run), *args])
    return code, cli_error(capsys.readouterr().err) if code else ""


def test_a_job_spec_edited_since_make_dag_is_refused_not_counted(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    complete_part(run, "client0")
    assert status_error(run, capsys) == (0, "")  # control: as make-dag wrote it
    edit_spec(run, "client0", output_stop=999999)  # before: 43% of false totals, exit 0
    code, message = status_error(run, capsys)
    assert code == 6
    documented("status-job-spec-changed", message, {str(run): "RUN"}, exit_code=6)


def test_a_piece_make_dag_never_plans_is_refused_by_its_reader(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The client refuses it; status names it on the client's line (as a damaged spec)."""
    edit_spec(run, "client0", output_start=5000)  # past its output_stop: no window kept
    code = main(["client", "--run-dir", str(run), "--node", "client0"])
    message = cli_error(capsys.readouterr().err)
    assert code == 6
    documented("job-spec-piece-out-of-order", message, {str(run): "RUN"}, exit_code=6)
    nodes = {n.name: n for n in read_status(RunDir(run)).nodes}
    assert message in nodes["client0"].detail and not nodes["client1"].detail  # control


def test_an_old_runs_edited_spec_is_named_in_its_clients_line(run: Path) -> None:
    """A run.json without ``job_sha256`` (written before it) still reads; a piece past its
    stretch is named on its client's line and not counted as windows done."""
    info = json.loads((run / "run.json").read_text())
    del info["job_sha256"]
    (run / "run.json").write_text(json.dumps(info))
    complete_part(run, "client0")
    status = read_status(RunDir(run))  # control: the old run reads
    assert not {n.name: n for n in status.nodes}["client0"].detail
    planned, spec = status.data_seconds_total, (run / "jobs" / "client0.json").read_text()
    for fields, words in (({"output_stop": 999999}, "past the"),
                          ({"output_start": 5000}, "keeps windows [5000, ")):
        (run / "jobs" / "client0.json").write_text(spec)
        edit_spec(run, "client0", **fields)
        status = read_status(RunDir(run))
        client0 = {n.name: n for n in status.nodes}["client0"]
        assert words in client0.detail and "which make-dag never plans" in client0.detail
        assert status.data_seconds_total <= planned + 1  # not 122951.9 s of a made-up stretch


def test_final_summary_of_a_copied_run_says_it_is_a_copy(
        run: Path, tmp_path: Path) -> None:
    for node in ("client0", "client1"):
        complete_part(run, node)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    helpers.complete_merge(RunDir(run), written_in=elsewhere)  # written there, copied here
    with pytest.raises(RunError) as caught:
        final_summary(RunDir(run), dag_status=0, failed_count=0)
    message = str(caught.value)
    assert "(this run directory is a copy of it, or was moved)" in message
    assert "output is missing" not in message
    documented("final-of-a-copied-run", message, {str(run): "RUN", str(elsewhere): "<old>"},
               exit_code=6)
    finish(run)  # control: the merge's output written here
    assert final_summary(RunDir(run), dag_status=0, failed_count=0).output_complete


def test_a_local_state_with_an_unknown_node_status_is_damaged(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = {"kind": "JOB", "status": "done", "attempts": 1}
    local_state(run, {"client0": node})
    assert status_error(run, capsys) == (0, "")  # control: a status run-local writes
    local_state(run, {"client0": {**node, "status": "exploded"}})  # before: shown as a state
    code, message = status_error(run, capsys)
    assert code == 6
    documented("local-state-unknown-status", message, {str(run): "RUN"}, exit_code=6)


def test_a_node_that_ended_before_it_started_by_the_clock_is_no_damage(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run-local takes both times from the wall clock, which an NTP step may set back while a
    node runs: its state is written (``local_state_text``) and read as it is, not refused as
    damaged (a refusal killed run-local mid-run, its writer's error being no OSError)."""
    stepped = {"kind": "JOB", "status": "done", "attempts": 1,
               "started": "2030-01-01T00:00:01.500000+00:00",
               "ended": "2030-01-01T00:00:01.200000+00:00"}
    attempt = {"attempt": 1, "status": "failed", "started": stepped["started"],
               "ended": stepped["ended"]}
    text = local_state_text({"nodes": {"merge": {**stepped, "history": [attempt]}}})
    assert '"ended": "2030-01-01T00:00:01.200000+00:00"' in text
    local_state(run, {"merge": {**stepped, "history": [attempt]}})
    assert status_error(run, capsys) == (0, "")
    local_state(run, {"merge": {**stepped, "status": "exploded"}})  # the control: damage
    assert status_error(run, capsys)[0] == 6


def test_a_dagman_node_status_file_that_is_a_fifo_is_named_not_waited_on(run: Path) -> None:
    status = run / "offline.status"
    status.write_text("")
    command = [sys.executable, "-m", "offline_iaas.cli", "status", str(run)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr  # control: an empty (regular) status file
    status.unlink()
    os.mkfifo(status)  # before: status waited for a writer for ever
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 6
    assert cli_error(done.stderr) == (f"{status}: cannot read DAGMan's node status: a FIFO "
                                      "(named pipe), not a regular file")


def test_every_piece_make_dag_plans_at_a_stride_of_no_binary_form_reads(
        small_config_file: Path) -> None:
    """At 1000 Hz and 10 Hz inference (a 0.1 s stride, inexact in binary) a stretch's last
    piece can end a rounding error past the stretch's end as its bounds were computed: every
    planned piece is one make-dag plans (an exact comparison of floats refused some); a piece with
    no window kept is still refused (the control)."""
    config = load_config(small_config_file, ["data.sample_rate=1000", "model.inference_rate=10",
                                             "data.start=1126259642", "data.duration=4096"])
    geometry, step = config.geometry, config.geometry.stride_seconds
    grid = geometry.grid_gps_start
    starts = [k * 977 + k % 7 for k in range(40)]  # windows from the grid: stretches of
    bounds = [(grid + a * step, grid + (a + 200 + 37 * (k % 11)) * step)  # 20 s to 57 s
              for k, a in enumerate(starts)]
    pieces = [piece for share in client_shares(config, make_stretches(geometry, bounds))
              for piece in share.pieces]
    assert len(pieces) >= 40
    assert [p for p in pieces if piece_damage(p) or piece_off_its_stretch(geometry, p)] == []
    empty = dataclasses.replace(pieces[0], output_start=pieces[0].output_stop)
    assert "keeps windows" in (piece_damage(empty) or "")


def test_a_dag_edited_to_run_a_shard_merge_as_a_client_is_named_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """offline.dag edited so that a shard merge's node runs ``client.sub``: status names the
    node's spec as a shard merge's on its line (its reader's words), as before the specs were
    read once (an AssertionError then)."""
    helpers.skip_data_check(monkeypatch)
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 1_000_000_000,
                    "duration": 64, "sample_rate": 256},
           "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
           "layout": {"servers": 1, "clients_per_server": 2}, "merge": {"shard_seconds": 16}}
    run = tmp_path / "run"
    make_dag(config_from_dict(raw, tmp_path / "c.toml"), RunDir(run))
    assert main(["status", str(run)]) == 0  # control: the DAG as make-dag wrote it
    dag = run / "offline.dag"
    assert "JOB shard0 shard.sub" in dag.read_text()
    dag.write_text(dag.read_text().replace("JOB shard0 shard.sub", "JOB shard0 client.sub"))
    capsys.readouterr()
    code = main(["status", str(run)])
    out = capsys.readouterr().out
    assert code == 0 and "shard0 is a shard merge node, not a client" in out


def test_a_maxjobs_count_beyond_the_configs_bound_is_refused_with_its_line(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``MAXJOBS clients 1000000000000`` edited into offline.dag: DAGMan reads it as a C int
    (10**12 wraps to a negative count, refused at submission; 2**32 + 1 to 1, one client at a
    time), and status read it as a throttle without a word (exit 0, checked on the old code);
    now one RunError naming the line, as RETRY's. The control: the bound of
    ``workflow.max_parallel_clients`` itself is read."""
    from offline_iaas.config_numbers import MAX_PARALLEL_NODES
    from offline_iaas.workflow.dag import parse_dag

    dag = run / "offline.dag"
    made = dag.read_text()
    dag.write_text(f"MAXJOBS clients {MAX_PARALLEL_NODES}\n{made}")
    assert status_error(run, capsys) == (0, "")
    for count in (2**32 + 1, 10**12):
        dag.write_text(f"MAXJOBS clients {count}\n{made}")
        code, message = status_error(run, capsys)
        assert (code, message) == (6, (
            f"{dag} line 1: the MAXJOBS count must be at most {MAX_PARALLEL_NODES} (as "
            f"workflow.max_parallel_clients and max_parallel_merges), got {count}"))
    documented("dag-maxjobs-beyond-bound", message, {str(run): "RUN"}, exit_code=code)
    with pytest.raises(RunError, match="line 2: the MAXJOBS count must be at most"):
        parse_dag(f"JOB c0 client.sub\nMAXJOBS merges {MAX_PARALLEL_NODES + 1}\n")
