"""What e2e's search on the raw strain costs, measured, against ``plan``'s estimate of it.

Exports the bench's ``e2e``, ``e2e-inject`` (the same graph with BBHnet on the raw strain too,
``search.inject``) and ``bbhnet`` workloads with seeded weights, runs each in-process on one
onnxruntime thread (the limit's loop, ``bench/limit.run_share``) over synthetic data at each
batch size, and prints the median CPU milliseconds per data second of each. The raw search's
measured cost is e2e-inject's less e2e's; ``plan``'s estimate (``sizing/raw_search.py``,
where the results file has no ``e2e-inject``) is computed by that very function from the
``bbhnet`` timing. CPU time of one thread, so other load on the machine disturbs it little.

Usage: .venv/bin/python benchmarks/raw_search_cost.py [--batch-sizes 8 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from offline_iaas.bench.limit import run_share
from offline_iaas.bench.provenance import source_commit
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.sweep import SweepPlan, export_workload
from offline_iaas.bench.workloads import (
    BBHNET,
    E2E,
    E2E_INJECT,
    Workload,
    synthetic_samples,
    write_weights,
)
from offline_iaas.repository.served import network_sessions
from offline_iaas.sizing.raw_search import raw_search_cost

DATA_SECONDS = {E2E.name: 24.0, E2E_INJECT.name: 24.0, BBHNET.name: 1500.0}


def cpu_ms_per_data_second(load: Workload, work: Path, batch_sizes: list[int],
                           repeats: int) -> dict[int, float]:
    """The median CPU ms per data second of ``load``'s graph in-process, at each batch size."""
    weights = write_weights(load, work / f"{load.name}-weights")
    config = export_workload(load, SweepPlan(), work / load.name, weights, 1)
    sessions = network_sessions(config, 1, "cpu")
    seconds = DATA_SECONDS[load.name]
    samples = synthetic_samples(load, seconds, 0)
    found = {}
    for batch in batch_sizes:
        run_share(sessions, config, samples[:, : 4 * batch * load.stride_samples], batch)
        times = []
        for _ in range(repeats):
            started = time.process_time()
            run_share(sessions, config, samples, batch)
            times.append((time.process_time() - started) / seconds * 1000)
        found[batch] = statistics.median(times)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ms = {load.name: cpu_ms_per_data_second(load, Path(tmp), args.batch_sizes, args.repeats)
              for load in (E2E, E2E_INJECT, BBHNET)}
        config = E2E_INJECT.config(Path(tmp) / "plan")
    print(f"# e2e's raw-strain search, CPU ms per data second on one thread, at commit "
          f"`{source_commit()}` (median of {args.repeats})")
    print("| batch | e2e | e2e-inject | raw search measured | bbhnet | plan's estimate "
          "| measured factor | plan's factor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch in args.batch_sizes:
        without, inject, bbhnet = (ms[name][batch] for name in (E2E.name, E2E_INJECT.name,
                                                                BBHNET.name))
        limit = Measurement("limit", BBHNET.name, batch, 1, 1, data_seconds=1000.0,
                            wall_seconds=bbhnet, client_cpu_seconds=bbhnet,
                            extra={"processes": 1})
        cost = raw_search_cost(config, [limit], batch, 1, 1000.0 / without, Path("-"),
                               E2E_INJECT.name)
        estimate = (cost.factor - 1) * without
        print(f"| {batch} | {without:.2f} | {inject:.2f} | {inject - without:.2f} | "
              f"{bbhnet:.3f} | {estimate:.2f} | {inject / without:.3f} | {cost.factor:.3f} |")


if __name__ == "__main__":
    main()
