"""run-local and report read each file of a run once where they read it at one moment (as
status does, ``binding.check_run``): counted by an audit hook on every open of the process."""

from __future__ import annotations

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
