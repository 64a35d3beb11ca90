"""Training whose floating-point code paths do not depend on the CPU: a pinned child process.

torch's ATen kernels, oneDNN, NNPACK, MKL and numpy each pick their code by the CPU they run
on (its instruction set, and for MKL its vendor; oneDNN's blocking also follows the cache
sizes), and each choice rounds differently; training turns one rounding difference into
another network. The pin (:data:`PINNED_ENVIRONMENT`, :data:`PINNED_TORCH_FLAGS`) makes every
x86-64 CPU with AVX2 and FMA (x86-64-v3: Intel since Haswell, AMD since Excavator, every Zen)
run the same code on the same operands:

* ATen at its AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``), whatever wider ones the CPU has;
* oneDNN and NNPACK off: convolutions go to ATen's im2col + GEMM, and GEMM is MKL's;
* MKL in conditional numerical reproducibility mode ``COMPATIBLE``: the one code branch MKL
  documents as giving the same bits on Intel and non-Intel processors (on AMD, MKL ignores
  ``MKL_CBWR=AVX2``), with ``MKL_DYNAMIC``/``OMP_DYNAMIC`` off as its reproducibility
  conditions ask;
* numpy without its AVX-512 kernels (``NPY_DISABLE_CPU_FEATURES``), OpenBLAS at its Haswell
  kernels. glibc's libm needs nothing: it picks its FMA variants on every such CPU.

These choices are made when the libraries load, so they cannot be changed in a process that
has already used torch: :func:`run_in_child` runs a function in a fresh interpreter
(``python -m offline_iaas.models.numerics``) with the pinned environment, forwards its log
lines and returns its result, or raises its error. On a CPU without AVX2 and FMA the pin
cannot hold (ATen falls back to its generic kernels): the child says so in a warning and in
:func:`numerics_in_use`. ``tests/test_training.py`` proves the pin by training under an
emulated AVX2-only CPU (docs/networks.md, "Training").
"""

from __future__ import annotations

import base64
import importlib
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from offline_iaas.errors import OfflineIaasError

logger = logging.getLogger(__name__)

PIN_NAME = "x86-64-v3"
"""The CPUs the pin holds on: x86-64 with AVX2 and FMA."""
PINNED_ENVIRONMENT: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
    "OPENBLAS_CORETYPE": "Haswell",
}
"""Read by torch, MKL, OpenMP and OpenBLAS when they load (plus ``NPY_DISABLE_CPU_FEATURES``,
which depends on the numpy build: :func:`pinned_environment`)."""
CHILD_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Set in every child unless the caller's environment sets them. Idle OpenMP threads sleep
instead of spinning: on a loaded two-core machine spinning threads starved each other and a
2-thread training step took ten times as long (docs/networks.md). Changes no result."""
PINNED_TORCH_FLAGS: dict[str, bool] = {"mkldnn": False, "nnpack": False}
"""torch backends switched off in the child before it runs anything."""
_MODULE = "offline_iaas.models.numerics"


def _numpy_dispatch() -> list[str]:
    """The CPU features this numpy build dispatches to at run time."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__  # numpy >= 2
    except ImportError:
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return list(__cpu_dispatch__)


def pinned_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the pin's variables set (they replace any of the same name)."""
    wider = [name for name in _numpy_dispatch() if name.startswith("AVX512")]
    return {**base, **PINNED_ENVIRONMENT, "NPY_DISABLE_CPU_FEATURES": " ".join(wider)}


def apply_torch_flags(flags: Mapping[str, bool]) -> None:
    """Switch torch's oneDNN / NNPACK backends as ``flags`` says (for this process)."""
    import torch

    if "mkldnn" in flags:
        torch.backends.mkldnn.enabled = flags["mkldnn"]
    if "nnpack" in flags:
        torch.backends.nnpack.set_flags(flags["nnpack"])


def numerics_in_use() -> dict[str, Any]:
    """What this process's floating-point code paths are: torch's kernel set and backends,
    the pin's variables as set, and whether the pin holds on this CPU."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    variables = {name: os.environ.get(name) for name in
                 (*PINNED_ENVIRONMENT, "NPY_DISABLE_CPU_FEATURES")}
    mkldnn = bool(torch.backends.mkldnn.enabled)
    nnpack = bool(torch._C._get_nnpack_enabled())
    pinned = all(variables[name] == value for name, value in PINNED_ENVIRONMENT.items())
    return {
        "pin": PIN_NAME if pinned and not mkldnn and not nnpack else None,
        "holds": pinned and not mkldnn and not nnpack and capability == "AVX2",
        "aten_capability": capability,
        "mkldnn": mkldnn,
        "nnpack": nnpack,
        "environment": variables,
        "cpu": cpu_model(),
    }


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_in_child(
    target: str,
    kwargs: Mapping[str, Any],
    *,
    pinned: bool = True,
    environment: Mapping[str, str] | None = None,
) -> Any:
    """Run ``target(**kwargs)`` in a fresh Python process and return its result.

    Parameters
    ----------
    target
        ``"package.module:function"``; ``kwargs`` and the result must pickle.
    pinned
        Run under the pin (:data:`PINNED_ENVIRONMENT`, :data:`PINNED_TORCH_FLAGS`); else with
        ``environment`` as it is (the tests' emulated CPUs).
    environment
        The child's environment before the pin (default: this process's).

    The child's log lines of this package come back through this process's loggers; an error
    it raises is raised here (an :class:`~offline_iaas.errors.OfflineIaasError` as itself).
    """
    env = {**CHILD_DEFAULTS, **(os.environ if environment is None else environment)}
    if pinned:
        env = pinned_environment(env)
    level = logging.getLogger("offline_iaas").getEffectiveLevel()
    with tempfile.TemporaryDirectory(prefix="offline-iaas-child-") as tmp:
        result_path = Path(tmp) / "result.pickle"
        request = {"target": target, "kwargs": dict(kwargs), "result": str(result_path),
                   "torch_flags": PINNED_TORCH_FLAGS if pinned else {}, "log_level": level,
                   "parent": os.getpid()}
        proc = subprocess.Popen(
            [sys.executable, "-m", _MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, text=True,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(base64.b64encode(pickle.dumps(request)).decode() + "\n")
            proc.stdin.close()
            for line in proc.stdout:
                _relay(line)
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if not result_path.exists():
            raise OfflineIaasError(f"the child process running {target} exited with code "
                                   f"{code} and no result (its error output is above)")
        outcome = pickle.loads(result_path.read_bytes())
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _relay(line: str) -> None:
    """One line of the child's standard output: a log record (JSON), else printed as is."""
    try:
        record = json.loads(line)
        name, level, message = record["name"], int(record["levelno"]), str(record["msg"])
    except (ValueError, KeyError, TypeError):
        print(line, end="", flush=True)
        return
    target = logging.getLogger(name)
    if target.isEnabledFor(level):
        target.handle(logging.makeLogRecord(
            {"name": name, "levelno": level, "levelname": logging.getLevelName(level),
             "msg": message}))


class _RecordWriter(logging.Handler):
    """The child's side of :func:`_relay`: each record as one JSON line on ``write``."""

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__()
        self.write = write

    def emit(self, record: logging.LogRecord) -> None:
        self.write(json.dumps({"name": record.name, "levelno": record.levelno,
                               "msg": record.getMessage()}) + "\n")


def _exit_with(parent: int, poll_seconds: float = 1.0) -> None:
    """Exit this process when ``parent`` is gone (a killed caller leaves no training behind)."""
    while os.getppid() == parent:
        time.sleep(poll_seconds)
    os._exit(1)


def _child_main() -> None:
    """Read the request from standard input, run it, write the outcome to its result file."""
    request = pickle.loads(base64.b64decode(sys.stdin.readline()))
    threading.Thread(target=_exit_with, args=(request["parent"],), daemon=True).start()
    # log records go to the parent on the original standard output; anything else printed
    # (by this process or a library) goes to standard error
    records = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    package = logging.getLogger("offline_iaas")
    package.handlers[:] = [_RecordWriter(records.write)]
    package.setLevel(request["log_level"])
    package.propagate = False
    apply_torch_flags(request["torch_flags"])
    if request["torch_flags"]:
        used = numerics_in_use()
        if not used["holds"]:
            logger.warning(
                f"numerics: this CPU ({used['cpu']}) runs torch's {used['aten_capability']} "
                f"kernels, not AVX2: the pin ({PIN_NAME}) does not hold, and what is trained "
                "here may differ from what other CPUs train")
    try:
        module, name = request["target"].split(":")
        outcome: dict[str, Any] = {
            "result": getattr(importlib.import_module(module), name)(**request["kwargs"])}
    except Exception as exc:  # handed to the parent, which raises it
        if not isinstance(exc, OfflineIaasError | OSError):  # those are one line in the CLI
            traceback.print_exc()
        try:
            pickle.dumps(exc)
            outcome = {"error": exc}
        except Exception:
            outcome = {"error": RuntimeError(f"{type(exc).__name__}: {exc}")}
    Path(request["result"]).write_bytes(pickle.dumps(outcome))
    records.close()


if __name__ == "__main__":
    _child_main()
