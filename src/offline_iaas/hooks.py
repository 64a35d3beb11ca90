"""Named points in the nodes' code where a test can step in; in a campaign nothing happens.

The nodes mark a few places with ``reached(run, node, point)``: a client's ``start`` and
``mid-stream`` (half its requests sent and the first answered, so that its sequence is open on
the server; and ``between-foreground``: a second or later foreground stream has sent its
first request), a server's ``start``, the merge's ``mid-write``. A test that wants a node to
fail there sets ``OFFLINE_IAAS_TEST_HOOK`` to ``/path/to/file.py:function`` before the nodes
start (the test suite sets it to ``tests/faults/inject.py:inject``, which reads
``RUN/faults.json``); the function is called with ``(run_dir, node, point)``. Without the
variable, as in every real campaign, ``reached`` returns at once.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir

HOOK_ENV = "OFFLINE_IAAS_TEST_HOOK"


def reached(run: RunDir, node: str, point: str) -> None:
    """``node`` is at ``point``: call the test hook, if one is set."""
    spec = os.environ.get(HOOK_ENV, "")
    if spec:
        _load(spec)(run.path, node, point)


@functools.cache
def _load(spec: str) -> Callable[[Path, str, str], None]:
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("offline_iaas_test_hook", path)
    if not path or not name or module_spec is None or not Path(path).is_file():
        raise RunError(f"{HOOK_ENV}={spec!r} is not FILE.py:FUNCTION")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)
