"""``offline-iaas bench``: run the sweep, then write ``results.json``, plots and ``RESULTS.md``.

Outputs in ``out_dir`` (``benchmarks/`` by default)::

    results.json           every measurement, the plan of the sweep, the machine
    RESULTS.md             tables, targets, the command
    throughput.png         data seconds per wall second against batch size and clients
    monitor.png            Triton statistics over the run (queue and compute per request)
    monitor/<workload>.csv the bench server's statistics (``serve/monitor.py`` format)
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import platform
import subprocess
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bench import report
from offline_iaas.bench.monitor_plot import plot_monitor
from offline_iaas.bench.provenance import source_commit
from offline_iaas.bench.results import Measurement, read_results, write_results
from offline_iaas.bench.sweep import SweepPlan, run_workload
from offline_iaas.bench.workloads import workload
from offline_iaas.errors import ConfigError
from offline_iaas.serve.startup_checks import visible_gpus

logger = logging.getLogger(__name__)



def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description(device: str = "cpu") -> dict[str, Any]:
    """CPU model, cores, memory, kernel, the GPU (``device`` ``cuda``) and the versions that
    shape the numbers."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kb = int(line.split()[1])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "numpy": _version("numpy"),
        "tritonclient": _version("tritonclient"),
        "nvidia-pytriton": _version("nvidia-pytriton"),
        "gpu": gpu_names() if device == "cuda" else "none",
    }


def gpu_names() -> str:
    """``nvidia-smi``'s name of every GPU this node sees (``unknown`` without it)."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return "; ".join(line.strip() for line in listed.splitlines() if line.strip()) or "unknown"


def run_bench(
    plan: SweepPlan, out_dir: Path, command: str,
    work_dir: Path | None = None,
) -> Path:
    """Run the whole bench and write its outputs into ``out_dir``; return RESULTS.md's path.

    Parameters
    ----------
    plan
        What to measure.
    out_dir
        Where the outputs go (created).
    command
        The command line, recorded in the outputs.
    work_dir
        Where the repositories and server logs go (default: a temporary directory, removed).
    """
    plan.check()
    if plan.device == "cuda" and visible_gpus() < 1:
        raise ConfigError(
            f"bench --device cuda measures the gpu flavor on a GPU, but nvidia-smi -L lists none "
            f"on {platform.node()}: run it on a GPU node (see benchmarks/GPU.md), or --device cpu"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    started_utc = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = source_commit()
    started = time.monotonic()
    load_before = os.getloadavg()
    measurements: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="offline-iaas-bench-") as tmp:
        work = work_dir or Path(tmp)
        for name in plan.workloads:
            csv_path = out_dir / "monitor" / f"{name}.csv"
            logger.info(f"bench: {name}: exporting the repositories and starting the servers")
            measurements += run_workload(workload(name), plan, work, csv_path)
    elapsed = time.monotonic() - started
    header = {
        "command": command,
        "commit": commit,
        "started": started_utc,
        "elapsed_seconds": round(elapsed, 1),
        "device": plan.device,
        "machine": machine_description(plan.device),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "plan": dataclasses.asdict(plan),
    }
    write_results(out_dir / "results.json", header, measurements)
    path = write_report(out_dir)
    logger.info(f"bench: wrote {path} ({elapsed:.0f} s)")
    return path


def write_report(out_dir: Path, redrawn: bool = False) -> Path:
    """(Re)write RESULTS.md and the plots from ``out_dir``'s results.json and monitor CSVs.

    The measurements are not repeated: the report of an earlier ``run_bench`` is rebuilt as it
    was (its command, machine and numbers), e.g. after the report's text changed; with
    ``redrawn`` the header also names the commit whose report code drew it.
    """
    results_path = out_dir / "results.json"
    header, measurements = read_results(results_path)
    if redrawn:
        header = {**header, "redrawn_at": source_commit()}
    fields = dict(header["plan"])
    if isinstance(fields.get("instances"), int):  # results written before the instance sweep
        fields["instances"] = [fields["instances"]]
    plan = SweepPlan(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    pts = report.points(measurements)
    report.plot_throughput(pts, plan, out_dir / "throughput.png")
    monitor_csvs = [out_dir / "monitor" / f"{name}.csv" for name in plan.workloads]
    plot_monitor([p for p in monitor_csvs if p.exists()], out_dir / "monitor.png")
    text = report.results_markdown(header, measurements, plan)
    path = out_dir / "RESULTS.md"
    write_text_atomic(path, text)
    return path
