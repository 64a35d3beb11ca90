"""The local DAG executor, run for real on small DAGs of python scripts."""

from __future__ import annotations

import json
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
from tests.helpers import (
    campaign_records,
    captured_log,
    complete_merge,
    complete_part,
    skip_data_check,
)

# One script plays every node; what it does is chosen by its second argument.
NODE_SCRIPT = r"""
import json, os, signal, subprocess, sys, time

name, mode, events, sleep = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


def mark(what, value=None):
    path = os.path.join(events, f"{name}.{what}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time() if value is None else value))
    os.replace(path + ".tmp", path)


def count():
    path = os.path.join(events, f"{name}.count")
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    open(path, "w").write(str(n))
    return n


if mode in ("service", "stubborn", "crash-once"):
    n = count()
    if mode == "crash-once" and n == 1:
        sys.exit(1)
    # A grandchild in the service's process group: it must be stopped with the service.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    mark(f"pids{n}", [os.getpid(), child.pid])
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def stop(signum, frame):
            mark("sigterm")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
    mark("start")
    while True:
        time.sleep(0.05)

mark("start")
print(f"{name} running", flush=True)
if mode in ("needs-server", "sigterm-parent"):
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(events, "server0.start")):
        if time.time() > deadline:
            sys.exit(4)
        time.sleep(0.02)
if mode == "flaky" and count() == 1:
    print("first attempt fails", file=sys.stderr)
    sys.exit(1)
if mode.startswith("fail"):  # fail-after-b: once b has started (no race with its start)
    while mode == "fail-after-b" and not os.path.exists(os.path.join(events, "b.start")):
        time.sleep(0.02)
    count()
    print("always fails", file=sys.stderr)
    sys.exit(3)
if mode == "sigterm-parent":
    os.kill(os.getppid(), signal.SIGTERM)
time.sleep(sleep)
mark("end")
"""

SUBMIT = """# test node
universe   = vanilla
executable = {python}
arguments  = "{script} $(node) $(mode) {events} $(sleep:0)"
initialdir = {run}
log        = logs/$(node).log
output     = logs/$(node).out
error      = logs/$(node).err
max_retries = $(restarts:0)
queue
"""


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


class Run:
    """A run directory with a hand-written DAG whose nodes are NODE_SCRIPT."""

    def __init__(self, root: Path, dag: str) -> None:
        self.dir = root / "run"
        self.events = root / "events"
        self.dir.mkdir()
        self.events.mkdir()
        script = root / "node.py"
        script.write_text(NODE_SCRIPT)
        submit = SUBMIT.format(
            python=sys.executable, script=script, events=self.events, run=self.dir
        )
        (self.dir / "node.sub").write_text(submit)
        (self.dir / "offline.dag").write_text(dag)
        self.lines: list[str] = []

    def __call__(self, **kwargs: float) -> None:
        with captured_log(self.lines):
            run_local(RunDir(self.dir), **kwargs)

    def time(self, name: str, what: str) -> float:
        return float((self.events / f"{name}.{what}").read_text())

    def has(self, name: str, what: str) -> bool:
        return (self.events / f"{name}.{what}").exists()

    def pids(self) -> list[int]:
        found = []
        for path in self.events.glob("*.pids[0-9]"):
            found += json.loads(path.read_text())
        if (self.dir / "local-state.json").exists():
            found += [n["pid"] for n in self.state().values() if n["pid"]]
        return found

    def state(self) -> dict:
        return json.loads((self.dir / "local-state.json").read_text())["nodes"]

    def index(self, text: str) -> int:
        return next(i for i, line in enumerate(self.lines) if text in line)


@pytest.fixture
def make_run(tmp_path: Path):
    runs: list[Run] = []

    class Maker:
        """``make_run(dag)``; ``make_run.again(...)`` makes another in a fresh directory."""

        def __call__(self, dag: str, root: Path | None = None) -> Run:
            run = Run(root or tmp_path, dag)
            runs.append(run)
            return run

        def again(self, dag: str | None, build=None, *args: str) -> Run:
            root = tmp_path / f"again{len(runs)}"
            root.mkdir()
            if build is not None:
                return build(lambda text: self(text, root), *args)
            return self(dag, root)

    yield Maker()
    # Whatever a failing test left behind is stopped here, by PID.
    for run in runs:
        for pid in run.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


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


# ---- PRE scripts, ABORT-DAG-ON, FINAL, file transfer, resubmission --------------------------
PRE_SCRIPT = r"""
import os, sys
events, name, retry, defers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
path = os.path.join(events, f"{name}.pre")
calls = open(path).read().split() if os.path.exists(path) else []
calls.append(retry)
open(path, "w").write(" ".join(calls))
print(f"pre {name} call {len(calls)}")
if len(calls) <= defers:
    sys.exit(9)  # not yet: DAGMan runs the script again after the DEFER time
fails = int(os.environ.get("PRE_FAILS", "0"))
sys.exit(1 if len(calls) - defers <= fails else 0)
"""

FINAL_SUBMIT = """universe = local
executable = {python}
arguments = "-c '{code}' {events}/final.args $(DAG_STATUS:0) $(FAILED_COUNT:0)"
initialdir = {run}
output = logs/final.out
error = logs/final.err
queue
"""

TRANSFER_SCRIPT = r"""
import os, sys
mode, events = sys.argv[1], sys.argv[2]
open(os.path.join(events, "cwd"), "w").write(os.getcwd())
data = open("in/data.txt").read()
if mode == "fail":
    sys.exit(3)
if mode != "nooutput":
    os.makedirs("out", exist_ok=True)
    open("out/result.txt", "w").write(data.upper())
open("scratch-only.txt", "w").write("stays in the sandbox")
"""

TRANSFER_SUBMIT = """executable = {python}
arguments = "{script} $(mode) {events}"
initialdir = {run}
output = logs/$(node).out
error = logs/$(node).err
should_transfer_files = YES
transfer_input_files = in/data.txt
preserve_relative_paths = true
transfer_output_files = out/result.txt
when_to_transfer_output = ON_SUCCESS
success_exit_code = 0
queue
"""


def pre_line(run: Run, node: str, defers: int, defer: str = "DEFER 9 0 ") -> str:
    script = run.dir.parent / "pre.py"
    script.write_text(PRE_SCRIPT)
    return f"SCRIPT {defer}PRE {node} {sys.executable} {script} {run.events} $JOB $RETRY {defers}\n"


def test_pre_script_defers_then_the_job_runs(make_run) -> None:
    run = make_run('JOB a node.sub\nVARS a node="a" mode="ok"\n')
    with open(run.dir / "offline.dag", "a") as f:
        f.write(pre_line(run, "a", defers=2))
    run()
    assert (run.events / "a.pre").read_text() == "0 0 0"  # deferred twice, then passed
    assert run.has("a", "end") and run.time("a", "start") > 0
    assert any("a: PRE script deferred (exit code 9)" in line for line in run.lines)
    assert run.state()["a"]["attempts"] == 1
    assert "pre a call 3" in (run.dir / "logs" / "a.pre.log").read_text()


def test_failed_pre_script_retries_the_node(make_run, monkeypatch) -> None:
    monkeypatch.setenv("PRE_FAILS", "1")
    run = make_run('JOB a node.sub\nVARS a node="a" mode="ok"\nRETRY a 1\n')
    with open(run.dir / "offline.dag", "a") as f:
        f.write(pre_line(run, "a", defers=0, defer=""))
    run()
    assert (run.events / "a.pre").read_text() == "0 1"  # $RETRY: 0, then 1
    assert any("a: failed with PRE script exit code 1" in line for line in run.lines)
    assert run.has("a", "end") and run.state()["a"]["attempts"] == 2


def write_final(run: Run) -> None:
    code = "import sys; open(sys.argv[1], ''w'').write(sys.argv[2] + '' '' + sys.argv[3])"
    (run.dir / "final.sub").write_text(
        FINAL_SUBMIT.format(python=sys.executable, code=code, events=run.events, run=run.dir)
    )
    with open(run.dir / "offline.dag", "a") as f:
        f.write("FINAL final final.sub\n")


def test_final_node_runs_last_with_the_dag_status(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'JOB a node.sub\nVARS a node="a" mode="ok" sleep="0.2"\n'
    )
    write_final(run)
    run()
    assert (run.events / "final.args").read_text() == "0 0"
    assert run.index("final: started") > run.index("a: done")
    assert run.state()["final"]["status"] == "done"

    failing = make_run.again('JOB c node.sub\nVARS c node="c" mode="fail"\n')
    write_final(failing)
    with pytest.raises(RunError, match="c \\(exit code 3"):
        failing()
    assert (failing.events / "final.args").read_text() == "2 1"


def test_abort_dag_on_removes_running_jobs_and_runs_final(make_run) -> None:
    run = make_run(
        'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
        'JOB b node.sub\nVARS b node="b" mode="ok" sleep="30"\n'
        'JOB c node.sub\nVARS c node="c" mode="fail-after-b"\nRETRY c 3 UNLESS-EXIT 3\n'
        "ABORT-DAG-ON c 3 RETURN 1\n"
        'JOB d node.sub\nVARS d node="d" mode="ok"\nPARENT c CHILD d\n'
    )
    write_final(run)
    with pytest.raises(RunError, match="DAG aborted: c exited with 3") as err:
        run()
    assert "not run: b, d" in str(err.value)
    assert (run.events / "c.count").read_text() == "1"  # the abort overrides the retries
    assert run.has("b", "start") and not run.has("b", "end") and not run.has("d", "start")
    assert (run.events / "final.args").read_text() == "3 1"
    state = run.state()
    assert (state["b"]["status"], state["d"]["status"]) == ("removed", "not-run")
    assert not [pid for pid in run.pids() if alive(pid)]


def transfer_run(make_run, mode: str) -> Run:
    run = make_run(f'JOB t xfer.sub\nVARS t node="t" mode="{mode}"\nRETRY t 1\n')
    script = run.dir.parent / "xfer.py"
    script.write_text(TRANSFER_SCRIPT)
    (run.dir / "xfer.sub").write_text(
        TRANSFER_SUBMIT.format(python=sys.executable, script=script, events=run.events, run=run.dir)
    )
    (run.dir / "in").mkdir()
    (run.dir / "in" / "data.txt").write_text("frames")
    return run


def test_file_transfer_runs_the_job_in_a_scratch_directory(make_run) -> None:
    run = transfer_run(make_run, "copy")
    run()
    assert (run.dir / "out" / "result.txt").read_text() == "FRAMES"
    cwd = Path((run.events / "cwd").read_text())
    assert cwd.parent == run.dir / "scratch" and cwd.name == "t.1"
    assert not (run.dir / "scratch").exists()  # cleaned after the job
    assert not (run.dir / "scratch-only.txt").exists()  # not listed: not transferred


def test_file_transfer_failures(make_run) -> None:
    run = transfer_run(make_run, "nooutput")
    with pytest.raises(RunError, match="t \\(exit code 0 after 2 attempts"):
        run()
    assert any("out/result.txt, which the job did not create" in line for line in run.lines)

    run = make_run.again(None, transfer_run, "fail")  # ON_SUCCESS: nothing comes back
    with pytest.raises(RunError, match="exit code 3"):
        run()
    assert not (run.dir / "out").exists()

    run = make_run.again(None, transfer_run, "copy")
    (run.dir / "in" / "data.txt").unlink()
    with pytest.raises(RunError):
        run()
    assert any("in/data.txt, which does not exist" in line for line in run.lines)


def test_an_incomplete_part_reruns_that_client_and_what_depends_on_it(make_run) -> None:
    """client0's part missing, truncated, or with a bare ``complete`` sidecar (what once
    sufficed): client0 and the merge run, client1 does not (every case of
    ``completeness.part_problem``: tests/test_records.py). Nothing damaged: nothing runs."""
    dag = "".join(f'JOB {n} node.sub\nVARS {n} node="{n}" mode="ok"\n'
                  for n in ("client0", "client1", "merge")) + "PARENT client0 client1 CHILD merge\n"
    for damage, reruns in ((lambda p: p.part("client0")[1].unlink(), True),
                           (lambda p: p.part("client0")[0].write_bytes(b"01234"), True),
                           (lambda p: p.part("client0")[1].write_text('{"complete": true}'), True),
                           (lambda p: None, False)):
        run = make_run.again(dag)
        paths = campaign_records(run.dir, ("client0", "client1"))
        for node in ("client0", "client1"):
            complete_part(paths, node, b"0123456789")
        complete_merge(paths)
        damage(paths)
        run()
        assert run.has("client0", "end") == run.has("merge", "end") == reruns
        assert not run.has("client1", "start")
