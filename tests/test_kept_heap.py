"""The served model keeps freed memory in its heap (``stateful.keep_freed_memory``, issue #42).

glibc's default returns the top of its heap to the system once more than a few hundred KiB
are free there, and a request's arrays then fault their pages in again on the next one
(measured: about 700 page faults, a quarter of the CPU of an o3-deepclean request in the
stub). Each case runs in a fresh process (the setting is process-wide): a request-like loop
that allocates, writes and frees 10 MiB of arrays, its minor page faults counted, with the
setting and, as the negative control, with glibc's default thresholds set explicitly (left
to itself glibc raises them when a large block is freed).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

LOOP = """
import numpy as np
from offline_iaas.repository.backend.stateful import keep_freed_memory

def faults():
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])

if {keep}:
    assert keep_freed_memory()
else:  # glibc's default thresholds (128 KiB), fixed: a large block freed earlier (numpy's
    # import, a BLAS buffer) would otherwise have raised them, by a history that varies
    import ctypes
    mallopt = ctypes.CDLL(None).mallopt
    assert mallopt(-1, 128 << 10) and mallopt(-3, 128 << 10)  # M_TRIM_, M_MMAP_THRESHOLD
for request in range(25):
    if request == 5:
        first = faults()
    arrays = [np.ones(25_000, np.float32) for _ in range(100)]  # 100 KiB each, 10 MiB
    del arrays
print((faults() - first) / 20)
"""


def faults_per_request(keep: bool) -> float:
    out = subprocess.run([sys.executable, "-c", LOOP.format(keep=keep)], capture_output=True,
                         text=True, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
def test_kept_heap_does_not_fault_freed_arrays_in_again() -> None:
    assert faults_per_request(keep=True) < 20  # measured 0.05-0.1 a request
    # the negative control: glibc's default faults the freed 10 MiB in again each request:
    # 2,410 page faults a request in a process started from a shell, 115-164 in one started
    # from a pytest-xdist worker (larger pieces at a time; why is not known), so the bound
    # sits at half the least measured
    assert faults_per_request(keep=False) > 60
