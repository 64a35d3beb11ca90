"""A run directory that was copied or moved: what in it still names its old place.

Nothing that runs a node does: the submit files, the DAG and the job specs name paths relative
to the run directory (the jobs start in it), so a copy runs its own nodes under its own lock.
The merge's output is the exception, by design of its formats: the index's HDF5 external
storage names the chunk files by absolute path, and the LAL cache of DeepClean's frames names
them by URL. The merge records the directory it wrote in (``run_dir`` in
``output/campaign.json``), so ``run-local`` can tell its output belongs to another directory
and run the merge node again (the index takes seconds; clients and chunk merges are kept).
"""

from __future__ import annotations

import os

from offline_iaas.rundir import RunDir, read_json


def merged_elsewhere(run: RunDir) -> str | None:
    """The run directory the merge's output was written in, when that is not ``run`` (a copy,
    or a move: the old directory is gone); None when it is ``run`` itself (by any name) or
    the output records none."""
    record = read_json(run.output[1])
    where = record.get("run_dir") if isinstance(record, dict) else None
    if not isinstance(where, str) or not where:
        return None
    try:
        if os.path.samefile(where, run.path):
            return None
    except OSError:  # the directory it was written in is gone: moved
        pass
    return where
