"""The served model keeps freed memory in its heap (``stateful.keep_freed_memory``, issue #42).

glibc's default returns the top of its heap to the system once more than a few hundred KiB
are free there, and a request's arrays then fault their pages in again on the next one
(measured: about 700 page faults, a quarter of the CPU of an o3-deepclean request in the
stub). Each case runs in a fresh process (the setting is process-wide): a request-like loop
that allocates, writes and frees 10 MiB of arrays, its minor page faults counted
(``getrusage``), with the setting and, as the negative control, with glibc's default
thresholds set explicitly (left to itself glibc raises them when a large block is freed).

How many pages glibc's default returns from the heap's top depends on where the process's
earlier allocations lie (measured: 0 to 2,410 faults a request for 100 KiB arrays, changed by
a line added to the script; the old bounds saw 115-164 from a pytest-xdist worker, 2,410 from
a shell). So a request also holds three 3 MiB arrays: over the default 128 KiB mmap threshold
they are mapped and unmapped each request whatever the heap's history (and under the 4 MiB
from which numpy asks for huge pages, whose faults depend on alignment); the kept heap serves
them from its top. The test asserts the ratio of the two counts, not a count (how many pages a
fault brings in is the kernel's business). The child runs isolated (``-I``) with only the
environment it needs: no ``MALLOC_*``, ``GLIBC_TUNABLES`` or thread setting inherited from the
test runner changes its allocations.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import offline_iaas

SRC = str(Path(offline_iaas.__file__).resolve().parents[1])
REQUESTS = 20
LOOP = """
import resource, sys
sys.path.insert(0, {src!r})
import numpy as np
from offline_iaas.repository.backend.stateful import keep_freed_memory

if {keep}:
    assert keep_freed_memory()
else:  # glibc's default thresholds (128 KiB), fixed: a large block freed earlier (numpy's
    # import, a BLAS buffer) would otherwise have raised them, by a history that varies
    import ctypes
    mallopt = ctypes.CDLL(None).mallopt
    assert mallopt(-1, 128 << 10) and mallopt(-3, 128 << 10)  # M_TRIM_, M_MMAP_THRESHOLD
SIZES = [786_432] * 3 + [25_000] * 10  # 3 of 3 MiB, 10 of 100 KiB: 10 MiB in all
for request in range(5 + {requests}):
    if request == 5:  # the first requests grow the heap: faults either way
        first = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(size, np.float32) for size in SIZES]
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - first)
"""
ENV = {"LC_ALL": "C", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
       "MKL_NUM_THREADS": "1"}
"""The child's whole environment: nothing inherited (no MALLOC_*, GLIBC_TUNABLES, PYTHON*);
one BLAS thread, so that numpy's import allocates the same whatever the machine's cores."""


def minor_faults(keep: bool) -> int:
    """Minor page faults of ``REQUESTS`` requests after five to warm up, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", LOOP.format(src=SRC, keep=keep, requests=REQUESTS)],
        env=ENV, capture_output=True, text=True, check=True, timeout=120)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_kept_heap_does_not_fault_freed_arrays_in_again() -> None:
    kept, default = minor_faults(keep=True), minor_faults(keep=False)
    # measured (20 requests): kept 1, default 46,352, in 5 runs idle and 5 beside a busy loop
    # on each of the 2 cores; default 30,760-50,400 with 8 other allocation histories before
    # the loop (the 3 MiB arrays alone: 2,304 pages a request). The bound, 200 times the kept
    # count (at least one), sits 150 times under the least ratio measured (30,760); half the
    # setting fails it: with its mmap threshold alone kept is 2,516-48,380 (ratio 18-1), its trim
    # threshold alone 46,140 (ratio 1)
    assert default >= 200 * max(kept, 1), (kept, default)
