"""What run-local does when something breaks or moves, on small DAGs of python scripts and
on make-dag's own DAG: the merge node retried, a node's error line in the summary even when
its log cannot be written, a copied run directory's merge run again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from tests.helpers import (
    campaign_records,
    captured_log,
    complete_merge,
    complete_part,
    skip_data_check,
)
from tests.scripted_runs import NODE_SCRIPT, SUBMIT, Run, make_run  # noqa: F401


def test_run_local_retries_the_merge_of_a_make_dag_dag(tmp_path: Path, monkeypatch) -> None:
    """make-dag's own DAG text, each role's submit file playing NODE_SCRIPT: the merge fails
    once and run-local runs it again, as DAGMan does with its RETRY line."""
    from offline_iaas.config import config_from_dict
    from offline_iaas.workflow.make_dag import make_dag

    skip_data_check(monkeypatch)
    raw = {
        "data": {"frames": "f", "channels": ["H1:X"], "start": 0, "duration": 16,
                 "sample_rate": 64},
        "model": {"repository": "repo"},
        "layout": {"servers": 1, "clients_per_server": 2},
        "merge": {"shard_seconds": 0},
        "workflow": {"retries": 1},
    }
    run_dir = tmp_path / "run"
    make_dag(config_from_dict(raw, tmp_path / "c.toml"), RunDir(run_dir))
    events = tmp_path / "events"
    events.mkdir()
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    modes = {"server": "service", "client": "ok", "merge": "flaky", "final": "ok"}
    for role, mode in modes.items():
        text = SUBMIT.format(python=sys.executable, script=script, events=events, run=run_dir)
        (run_dir / f"{role}.sub").write_text(text.replace("$(mode)", mode))
    assert "RETRY merge 1 UNLESS-EXIT 2" in (run_dir / "offline.dag").read_text()
    lines: list[str] = []
    with captured_log(lines):
        run_local(RunDir(run_dir))
    assert (events / "merge.count").read_text() == "2" and (events / "merge.end").exists()
    assert "merge: failed with exit code 1 (see logs/merge.err), retrying" in lines
    assert "merge: started (attempt 2/2)" in lines
    state = json.loads((run_dir / "local-state.json").read_text())["nodes"]
    assert (state["merge"]["status"], state["merge"]["attempts"]) == ("done", 2)


def test_a_copied_run_directory_runs_its_merge_again(request, tmp_path: Path) -> None:
    """The merge's output names its run directory's files (the index its shards, the LAL
    cache its frames): in a copy, or after a move, run-local runs the merge node again; under
    another name of the same directory (a link) it does not."""
    dag = ('JOB client0 node.sub\nVARS client0 node="client0" mode="ok"\n'
           'JOB merge node.sub\nVARS merge node="merge" mode="ok"\n'
           "PARENT client0 CHILD merge\n")

    def finished(run: Run, written_in: Path) -> Run:
        paths = campaign_records(run.dir, ("client0",))
        complete_part(paths, "client0")
        complete_merge(paths, written_in=written_in)
        return run

    maker = request.getfixturevalue("make_run")  # the fixture of tests/scripted_runs.py
    run = finished(maker(dag), tmp_path / "gone" / "run")  # written where it is no more
    run()
    assert run.has("merge", "end") and not run.has("client0", "start")
    assert any(f"merge: runs again: its output was written in {tmp_path / 'gone' / 'run'}" in line
               for line in run.lines)

    run = maker.again(dag)
    finished(run, run.dir)
    alias = run.dir.parent / "alias"
    alias.symlink_to(run.dir)
    run_local(RunDir(alias))  # the same directory by another name: nothing to do
    assert not run.has("merge", "start")


def test_run_local_says_once_that_it_cannot_write_its_state(request, monkeypatch) -> None:
    """local-state.json cannot be written (a full disk: ENOSPC injected where its temporary
    file is opened, below ``atomic.replaced_atomically``): the run goes on (the file is
    informative) and says so once, not at every change, since ``status`` shows the run as
    last written."""
    import builtins
    import errno
    import os

    from offline_iaas import atomic

    def full(path, *args, **kwargs):
        if Path(path).name.startswith(".local-state.json."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "open", full, raising=False)
    run = request.getfixturevalue("make_run")(
        'JOB a node.sub\nVARS a node="a" mode="ok"\nJOB b node.sub\nVARS b node="b" mode="ok"\n'
        "PARENT a CHILD b\n")
    run()
    assert run.has("a", "end") and run.has("b", "end")
    said = [line for line in run.lines if "cannot write" in line]
    assert said == [f"run-local: cannot write {run.dir / 'local-state.json'} (No space left on "
                    "device): status shows the run as last written until it can"], run.lines
    assert not (run.dir / "local-state.json").exists()
