"""The regression check: service/limit on the tiny workload, against a recorded value.

The tiny workload's windows are cheap, so its service/limit ratio is dominated by what the
service adds per request (gRPC, the sequence batcher, the python backend, the client): a
regression there shows in it. The campaign's repository for the tiny workload's config (the
fused classifier model) with one instance, one client; the limit and the service alternate
``repeats`` times and the best of each is taken. Two ratios are recorded: per wall second, and
per CPU second (less moved by other processes' load, but not immune to it: cores shared with
busy neighbours do less per CPU second).

Record a new value (``benchmarks/regression.json``) with::

    .venv/bin/python -m offline_iaas.bench.regression --record benchmarks/regression.json

and check this machine against it (``make bench-regression``: exit 1 when either ratio fell
below half the recorded one) with::

    .venv/bin/python -m offline_iaas.bench.regression --check benchmarks/regression.json

It is a benchmark, not a test: the ratios move with the CPU model and with what else runs
(CI's run of the suite at ba4065d, every core busy, measured 0.22 per wall and per CPU second
against the recorded 0.50 and 0.37), so the suite runs the command and checks what it prints,
never the numbers' size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bench.limit import measure_limit
from offline_iaas.bench.results import best_by_path
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import measure_service
from offline_iaas.bench.workloads import TINY
from offline_iaas.bounded_read import read_text_or
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir

INSTANCES = 1
BATCH_SIZE = 32
CLIENTS = 1
IN_FLIGHT = 4
DATA_SECONDS = 4000.0
REPEATS = 3


@dataclass(frozen=True)
class RegressionRatios:
    """Service over limit on the tiny workload."""

    wall: float
    """Data seconds per wall second."""
    cpu: float
    """Data seconds per CPU second."""

    def to_dict(self) -> dict[str, float]:
        return {"service_over_limit_wall": self.wall, "service_over_limit_cpu": self.cpu}


def measure_regression_ratios(work_dir: Path, repeats: int = REPEATS) -> RegressionRatios:
    """Measure the tiny workload's service/limit ratios on a fresh server in ``work_dir``."""
    config = TINY.config(work_dir / "repository", INSTANCES, CLIENTS, BATCH_SIZE)
    export_repository(config)
    model, outputs = config.model.name, config.outputs.names
    found = []
    with bench_server(config.model.repository, RunDir(work_dir / "run"), [model]) as server:

        def service(seconds: float):
            return measure_service(TINY, server, model, outputs, BATCH_SIZE, CLIENTS, IN_FLIGHT,
                                   seconds, INSTANCES)

        service(DATA_SECONDS / 10)
        for _ in range(repeats):
            found.append(measure_limit(TINY, config, BATCH_SIZE, DATA_SECONDS, CLIENTS))
            found.append(service(DATA_SECONDS))
    best = best_by_path(found)
    per_cpu = {
        path: max(m.data_seconds_per_cpu_second for m in found if m.path == path)
        for path in ("limit", "service")
    }
    return RegressionRatios(
        wall=best["service"].data_seconds_per_second / best["limit"].data_seconds_per_second,
        cpu=per_cpu["service"] / per_cpu["limit"],
    )


def halved(measured: RegressionRatios, recorded: dict[str, float]) -> list[str]:
    """One line per ratio of ``measured`` below half its value in ``recorded`` (a
    ``--record`` file's contents); a ratio that is not a number counts as halved."""
    found = []
    for key, value in measured.to_dict().items():
        floor = recorded[key] / 2
        if not value >= floor:
            found.append(f"{key} {value:.3g} is below half the recorded {recorded[key]:.3g}")
    return found


def _recorded(path: Path) -> dict[str, Any]:
    """The ratios ``--record`` wrote to ``path`` (ConfigError naming it where it is no such
    record: not JSON, or a ratio or the command missing or of another kind)."""
    text = read_text_or(path, ConfigError)
    try:
        recorded = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"{path}: not a record of --record (not JSON: {err})") from None
    wanted = [*RegressionRatios(0.0, 0.0).to_dict(), "command"]
    if not isinstance(recorded, dict) or any(
            not isinstance(recorded.get(key), str if key == "command" else float | int)
            or isinstance(recorded.get(key), bool) for key in wanted):
        raise ConfigError(f"{path}: not a record of --record (it holds "
                          f"{', '.join(wanted)}: numbers and the command)")
    return recorded


def main(argv: list[str] | None = None) -> int:
    """``--record`` or ``--check`` (``argv``: the command line's); ConfigError naming
    ``--check``'s file where it is no regular file (a FIFO: not waited on) or not text."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", type=Path, help="JSON file to write")
    action.add_argument("--check", type=Path,
                        help="JSON file written by --record: exit 1 if a ratio halved")
    args = parser.parse_args(argv)
    recorded = _recorded(args.check) if args.check else None
    with tempfile.TemporaryDirectory(prefix="offline-iaas-regression-") as tmp:
        ratios = measure_regression_ratios(Path(tmp))
    if recorded is not None:
        for key, value in ratios.to_dict().items():
            print(f"{key}: {value:.3f} (recorded {recorded[key]:.3f} by "
                  f"{recorded['command']})")
        problems = halved(ratios, recorded)
        for line in problems:
            print(f"regression: {line}")
        return 1 if problems else 0
    data = {
        **ratios.to_dict(),
        "workload": TINY.name,
        "batch_size": BATCH_SIZE,
        "clients": CLIENTS,
        "data_seconds": DATA_SECONDS,
        "repeats": REPEATS,
        "command": f"python -m offline_iaas.bench.regression --record {args.record}",
    }
    write_text_atomic(args.record, json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ConfigError as err:  # --check's record unreadable: one line naming it
        print(f"offline_iaas.bench.regression: error: {err}", file=sys.stderr)
        raise SystemExit(exit_code(err)) from None
