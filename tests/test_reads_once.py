"""run-local and report read each file of a run once where they read it at one moment (as
status does, ``binding.check_run``): counted by an audit hook on every open of the process."""

from __future__ import annotations

import html
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import MAKE_DAG_HEADER
from offline_iaas.workflow.local import run_local
from tests.helpers import campaign_records, captured_log, complete_merge, complete_part

_COUNTING: list[Counter[str]] = []
"""The counter of the ``opened`` block running, if any (an audit hook cannot be removed)."""


def _count_open(event: str, args: tuple) -> None:
    if _COUNTING and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _COUNTING[-1][os.path.abspath(os.fsdecode(args[0]))] += 1


sys.addaudithook(_count_open)


@contextmanager
def opened(run: Path) -> Iterator[Counter[str]]:
    """The files under ``run`` opened in the block (builtins.open and os.open), and how often,
    by their path relative to ``run``."""
    counts: Counter[str] = Counter()
    _COUNTING.append(counts)
    found: Counter[str] = Counter()
    try:
        yield found
    finally:
        _COUNTING.remove(counts)
        root = str(run.absolute())
        found.update({os.path.relpath(path, root): n for path, n in counts.items()
                      if path.startswith(root + os.sep)})


def complete_run(tmp_path: Path) -> Path:
    """A run directory with make-dag's DAG header (so the DAG's check reads run.json), its
    campaign.toml, run.json and job specs, and every node's output complete."""
    run = tmp_path / "run"
    paths = campaign_records(run, ("client0", "client1"))
    (run / "node.sub").write_text("executable = /bin/true\nqueue\n")
    (run / "offline.dag").write_text(
        f"{MAKE_DAG_HEADER}\nSERVICE server0 node.sub\nJOB client0 node.sub\n"
        "JOB client1 node.sub\nJOB merge node.sub\nPARENT client0 client1 CHILD merge\n"
        "FINAL final node.sub\n")
    for node in ("client0", "client1"):
        complete_part(paths, node)
    complete_merge(paths)
    return run


def test_run_local_reads_run_json_and_campaign_toml_once(tmp_path: Path) -> None:
    run = complete_run(tmp_path)
    lines: list[str] = []
    with captured_log(lines), opened(run) as files:
        run_local(RunDir(run))
    assert lines == [f"nothing to do: every node of {run} is complete"]
    assert files["run.json"] == 1 and files["campaign.toml"] == 1, files
    # the control: the hook sees the other files read, each once too
    assert files["offline.dag"] == 1 and files["node.sub"] == 1, files
    assert files["jobs/client0.json"] == 1 and files["parts/client1.json"] == 1, files


def run_with_state(tmp_path: Path) -> Path:
    """``complete_run`` whose merge and FINAL node run-local ran (its local-state.json
    written), the merge's output written afterwards."""
    run = complete_run(tmp_path)
    (run / "output" / "campaign.json").unlink()
    with captured_log([]):
        run_local(RunDir(run))
    complete_merge(RunDir(run))
    assert (run / "local-state.json").exists()
    return run


def test_report_and_status_read_each_file_of_the_run_once(tmp_path: Path, capsys) -> None:
    from offline_iaas.cli import main

    run = run_with_state(tmp_path)
    once = {"offline.dag", "run.json", "jobs/client0.json", "jobs/client1.json",
            "parts/client0.json", "parts/client1.json", "local-state.json",
            "output/campaign.json"}
    with opened(run) as files:
        assert main(["report", str(run)]) == 0
    # campaign.toml too: its text read once, parsed by status's check, shown on the page
    assert {name: files[name] for name in once | {"campaign.toml"}} == dict.fromkeys(
        once | {"campaign.toml"}, 1), files
    page = (run / "report" / "index.html").read_text()
    # the control: every section drawn, the node timeline from the state read once, the
    # config's text shown as it is
    assert "Not drawn" not in page and "No node timeline" not in page
    assert html.escape((run / "campaign.toml").read_text()) in page
    assert "client part(s) not done" not in page
    with opened(run) as files:
        assert main(["status", str(run)]) == 0
    assert {name: files[name] for name in once | {"campaign.toml"}} == dict.fromkeys(
        once | {"campaign.toml"}, 1), files
    assert "merge" in capsys.readouterr().out
