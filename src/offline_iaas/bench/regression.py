"""The regression check: service/limit on the tiny workload, against a recorded value.

The tiny workload's windows are cheap, so its service/limit ratio is dominated by what the
service adds per request (gRPC, the sequence batcher, the python backend, the client): a
regression there shows in it. The campaign's repository for the tiny workload's config (the
fused classifier model) with one instance, one client; the limit and the service alternate
``repeats`` times and the best of each is taken. Two ratios are recorded: per wall second, and
per CPU second (which other processes' load on the machine does not move).

Record a new value (``benchmarks/regression.json``) with::

    .venv/bin/python -m offline_iaas.bench.regression --record benchmarks/regression.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bench.limit import measure_limit
from offline_iaas.bench.results import best_by_path
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import measure_service
from offline_iaas.bench.workloads import TINY
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offline-iaas-regression-") as tmp:
        ratios = measure_regression_ratios(Path(tmp))
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


if __name__ == "__main__":
    main()
