"""run-local's DAGMan features beyond nodes and retries, run for real on small DAGs of python
scripts: PRE scripts (deferring, retried), the FINAL node, ABORT-DAG-ON, file transfer, and the
rerun of a client whose part is incomplete with what depends on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from offline_iaas.errors import RunError
from tests import scripted_runs
from tests.helpers import campaign_records, complete_merge, complete_part
from tests.scripted_runs import Run, alive

make_run = scripted_runs.make_run
"""Run directories with a hand-written DAG of python scripts (its fixture)."""

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
