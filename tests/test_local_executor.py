"""The local DAG executor, run for real on small DAGs of python scripts."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import parse_dag
from offline_iaas.workflow.emulation import node_command, split_arguments, split_environment
from offline_iaas.workflow.local import run_local
from tests import scripted_runs
from tests.helpers import (
    campaign_records,
    complete_merge,
    complete_part,
    skip_data_check,
)
from tests.scripted_runs import alive

make_run = scripted_runs.make_run
"""Run directories with a hand-written DAG of python scripts (its fixture)."""


def test_services_first_then_stopped(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'SERVICE server1 node.sub\nVARS server1 node="server1" mode="service"\n'
        'JOB a node.sub\nVARS a node="a" mode="needs-server"\n'
    )
    run()
    first_job = run.index("a: started")
    assert run.index("server0: started") < first_job and run.index("server1: started") < first_job
    assert run.has("a", "end")
    assert run.has("server0", "sigterm") and run.has("server1", "sigterm")
    pids = run.pids()
    assert len(pids) >= 5  # two services, their two grandchildren, the job
    assert not [pid for pid in pids if alive(pid)]
    state = run.state()
    assert state["server0"]["status"] == "stopped" and state["a"]["status"] == "done"
    assert (run.dir / "logs" / "a.out").read_text() == "a running\n"


def test_stubborn_service_is_killed(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="stubborn"\n'
        'JOB a node.sub\nVARS a node="a" mode="needs-server"\n'
    )
    run(stop_timeout_seconds=0.5)
    assert run.has("a", "end")
    assert any("server0: killed" in line for line in run.lines)
    assert not [pid for pid in run.pids() if alive(pid)]


def test_failed_job_is_retried(make_run) -> None:
    run = make_run('JOB b node.sub\nVARS b node="b" mode="flaky"\nRETRY b 2\n')
    run()
    assert run.has("b", "end") and (run.events / "b.count").read_text() == "2"
    assert "b: failed with exit code 1 (see logs/b.err), retrying" in run.lines
    assert "b: started (attempt 2/3)" in run.lines
    assert run.state()["b"]["attempts"] == 2
    assert "first attempt fails" in (run.dir / "logs" / "b.err").read_text()


def test_failure_stops_everything_and_names_the_node(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'JOB c node.sub\nVARS c node="c" mode="fail"\nRETRY c 1\n'
        'JOB d node.sub\nVARS d node="d" mode="ok"\n'
        'JOB e node.sub\nVARS e node="e" mode="ok"\n'
        "PARENT c CHILD d\n"
    )
    with pytest.raises(RunError) as err:
        run()
    message = str(err.value)
    assert "c (exit code 3 after 2 attempts; see logs/c.err, logs/c.out)" in message
    assert "not run: d" in message
    assert (run.events / "c.count").read_text() == "2"
    assert not run.has("d", "start")
    assert run.has("e", "end")  # independent of the failed node: still run
    assert run.has("server0", "sigterm")
    assert not [pid for pid in run.pids() if alive(pid)]
    state = run.state()
    assert (state["c"]["status"], state["d"]["status"]) == ("failed", "not-run")


def test_unless_exit_is_not_retried(make_run) -> None:
    run = make_run('JOB c node.sub\nVARS c node="c" mode="fail"\nRETRY c 3 UNLESS-EXIT 3\n')
    with pytest.raises(RunError, match="after 1 attempt;"):
        run()
    assert (run.events / "c.count").read_text() == "1"


def test_parents_before_children(make_run) -> None:
    run = make_run(
        'JOB a node.sub\nVARS a node="a" mode="ok" sleep="0.2"\n'
        'JOB b node.sub\nVARS b node="b" mode="ok"\n'
        'JOB c node.sub\nVARS c node="c" mode="ok"\n'
        'JOB d node.sub\nVARS d node="d" mode="ok"\n'
        "PARENT a b CHILD c\nPARENT c CHILD d\n"
    )
    run()
    assert run.time("c", "start") >= max(run.time("a", "end"), run.time("b", "end"))
    assert run.time("d", "start") >= run.time("c", "end")


def test_maxjobs_serializes_a_category(make_run) -> None:
    dag = ""
    for name in ("p", "q", "r"):
        dag += f'JOB {name} node.sub\nVARS {name} node="{name}" mode="ok" sleep="0.2"\n'
        dag += f"CATEGORY {name} clients\n"
    run = make_run(dag + "MAXJOBS clients 1\n")
    run()
    spans = sorted((run.time(n, "start"), run.time(n, "end")) for n in ("p", "q", "r"))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end


@pytest.mark.server_exits  # its stand-in server fails on purpose
def test_service_restarted_per_max_retries(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="crash-once" restarts="1"\n'
        # a waits for the restarted server (the first attempt crashes before it starts)
        'JOB a node.sub\nVARS a node="a" mode="needs-server" sleep="0.2"\n'
    )
    run()
    assert run.has("a", "end")
    assert (run.events / "server0.count").read_text() == "2"
    assert any(
        "server0: exited with exit code 1" in line and "restarting" in line for line in run.lines
    )
    assert run.has("server0", "sigterm")


def test_nothing_to_do_when_complete(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'JOB client0 node.sub\nVARS client0 node="client0" mode="ok"\n'
        'JOB merge node.sub\nVARS merge node="merge" mode="ok"\n'
        "PARENT client0 CHILD merge\n"
    )
    paths = campaign_records(run.dir, ("client0",))
    complete_part(paths, "client0")
    run()  # client0 complete: only merge runs, without the server it does not use
    assert not run.has("client0", "start") and run.has("merge", "end")
    assert "client0: complete, not run again" in run.lines
    assert "server0: not started (only merges remain to run)" in run.lines
    assert not run.has("server0", "start") and run.state()["server0"]["status"] == "not-run"

    complete_merge(paths)
    run.lines.clear()
    run()
    assert run.lines == [f"nothing to do: every node of {run.dir} is complete"]
    assert not run.has("server0", "start")


def test_sigterm_stops_every_node(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'JOB a node.sub\nVARS a node="a" mode="sigterm-parent" sleep="30"\n'
    )
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunError, match="SIGTERM"):
        run()
    assert signal.getsignal(signal.SIGTERM) is before
    assert not run.has("a", "end")
    assert not [pid for pid in run.pids() if alive(pid)]
    assert run.state()["a"]["status"] == "stopped"


def test_invalid_submit_file_starts_nothing(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\nJOB a other.sub\n'
    )
    (run.dir / "other.sub").write_text("executable = /no/such/program\nqueue\n")
    with pytest.raises(RunError, match="other.sub.*does not exist"):
        run()
    assert not run.has("server0", "start") and not (run.dir / "local-state.json").exists()


def test_missing_dag() -> None:
    with pytest.raises(RunError, match="no offline.dag"):
        run_local(RunDir(Path("/nonexistent-run-dir")))


def test_split_arguments() -> None:
    assert split_arguments("\"a  b 'c d' 'it''s' e\"\"f ''\"") == [
        "a",
        "b",
        "c d",
        "it's",
        'e"f',
        "",
    ]
    assert split_arguments('old style \\"x\\"') == ["old", "style", '"x"']
    assert split_arguments("") == []
    with pytest.raises(ValueError):
        split_arguments('"\'open"')


def test_split_environment() -> None:
    assert split_environment("\"A=1 B='x y' C=\"") == {"A": "1", "B": "x y", "C": ""}
    assert split_environment("A=1;B=2") == {"A": "1", "B": "2"}


def test_node_command_expands_vars(tmp_path: Path) -> None:
    dag = parse_dag('JOB n x.sub\nVARS n node="n7" extra="two words"\n')
    submit = {
        "executable": sys.executable,
        "arguments": "\"-c pass $(NODE) '$(extra)'\"",
        "initialdir": str(tmp_path),
        "output": "logs/$(node).out",
        "environment": '"RUN=$(node)"',
    }
    cmd = node_command(RunDir(tmp_path), dag.nodes["n"], submit, 1)
    assert cmd.argv == [sys.executable, "-c", "pass", "n7", "two words"]
    assert cmd.stdout == tmp_path / "logs" / "n7.out" and cmd.stderr == Path(os.devnull)
    assert cmd.environment == {"RUN": "n7"}
    with pytest.raises(RunError, match=r"\$\(nope\)"):
        node_command(RunDir(tmp_path), dag.nodes["n"], {**submit, "output": "$(nope)"}, 1)


def test_commands_of_a_make_dag_run_directory(tmp_path: Path, monkeypatch) -> None:
    """The executor reads what make-dag writes: every node resolves to the console script."""
    from offline_iaas.config import config_from_dict
    from offline_iaas.workflow.make_dag import console_script, make_dag
    from offline_iaas.workflow.submit import parse_submit

    skip_data_check(monkeypatch)
    raw = {
        "data": {
            "frames": "f",
            "channels": ["H1:X"],
            "start": 0,
            "duration": 16,
            "sample_rate": 64,
        },
        "model": {"repository": "repo"},
        "layout": {"servers": 1, "clients_per_server": 2},
    }
    run = tmp_path / "run"
    make_dag(config_from_dict(raw, tmp_path / "c.toml"), RunDir(run))
    dag = parse_dag((run / "offline.dag").read_text())
    exe = str(console_script())
    argv = {
        name: node_command(RunDir(run), node, parse_submit(run / node.submit), 1)
        for name, node in dag.nodes.items()
    }
    # every node starts in the run directory and is told it is "." (a copy runs its own)
    assert argv["server0"].argv == [exe, "serve", "--run-dir", ".", "--node", "server0"]
    assert argv["client1"].argv == [exe, "client", "--run-dir", ".", "--node", "client1"]
    assert argv["merge"].argv == [exe, "merge", "--run-dir", "."]
    assert {command.cwd for command in argv.values()} == {run}
    assert argv["client1"].stderr == run / "logs" / "client1.err"
    assert argv["merge"].stdout == run / "logs" / "merge.out" and argv["merge"].cwd == run
    assert argv["server0"].max_retries == 2
