"""GPU benchmark: the gpu flavor's throughput on a GPU node, appended to RESULTS-gpu.md.

What it measures (data seconds per wall second, the bench's workloads):

* **limit** — always: the workload's exported graph in-process with onnxruntime's CUDA
  provider over every window (windows built on the host, copied to the device per batch,
  as a hand-written loop would), at each ``--batch-sizes``;
* **service** and **naive** — with ``--triton``, when a ``tritonserver`` with the onnxruntime
  backend is on PATH (a Triton container): the gpu-flavor repository (ONNX snapshotter with
  implicit state → batched network, KIND_GPU, ``bench/gpu.py``) served by one server, ``k``
  clients streaming snapshot updates (service) or whole windows (naive).

It refuses to run (exit code 5, nothing written) without a GPU or without onnxruntime-gpu:
there are no made-up numbers. The published mark to beat is about 5,000 s of DeepClean data
per second per GPU.

Usage, on the GPU node, from the repository root::

    # limit only (needs: pip install onnxruntime-gpu, matching the node's CUDA)
    .venv/bin/python benchmarks/gpu_bench.py
    # limit, service and naive inside the Triton container (offline-iaas installed in it)
    apptainer exec --nv --bind $PWD tritonserver_24.09-py3.sif \\
        python benchmarks/gpu_bench.py --triton --clients 1 4 8

Results: a section appended to ``benchmarks/RESULTS-gpu.md`` (device, command, table) and
``benchmarks/results-gpu.json`` (for ``offline-iaas plan --from-bench``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import tempfile
import time
from pathlib import Path

from offline_iaas.bench.gpu import (
    CUDA,
    GPU_PIPELINE,
    require_gpu,
    triton_with_onnxruntime_backend,
    write_gpu_repository,
)
from offline_iaas.bench.limit import measure_limit
from offline_iaas.bench.naive import measure_naive
from offline_iaas.bench.repository import NETWORK, ServerLayout
from offline_iaas.bench.results import Measurement, write_results
from offline_iaas.bench.run import machine_description
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import measure_service
from offline_iaas.bench.workloads import INPUT_NAME, build_network, workload
from offline_iaas.errors import OfflineIaasError, ServerError
from offline_iaas.models.weights import export_onnx

HERE = Path(__file__).resolve().parent


def _table(device: str, measurements: list[Measurement]) -> str:
    lines = [
        "| device | workload | path | batch | clients | data-s / s | sent B / data-s |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for m in measurements:
        lines.append(
            f"| {device} | {m.workload} | {m.path} | {m.batch_size} | {m.clients} | "
            f"{m.data_seconds_per_second:,.1f} | {m.bytes_sent_per_data_second:,.0f} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    device = require_gpu()
    triton = triton_with_onnxruntime_backend() if args.triton else None
    if args.triton and triton is None:
        raise ServerError("--triton: no tritonserver with the onnxruntime backend on PATH")
    started = time.monotonic()
    measurements: list[Measurement] = []
    layout = ServerLayout(instances=1, intra_op_threads=1)
    with tempfile.TemporaryDirectory(prefix="offline-iaas-gpu-bench-") as tmp:
        for name in args.workloads:
            # no online average on the GPU path: the gpu flavor's averager takes [B, n, K]
            # predictions, the bench's DeepClean graph gives [B, n, 1, K]
            load = dataclasses.replace(workload(name), averaged=False)
            graph = Path(tmp) / f"{name}.onnx"
            example = (2, load.channels, load.kernel_samples)
            export_onnx(build_network(load), graph, INPUT_NAME, load.output_name, example)
            for batch in args.batch_sizes:
                for _ in range(args.repeats):
                    m = measure_limit(load, graph, layout, batch, args.seconds, providers=CUDA)
                    measurements.append(m)
                    print(f"{name} limit batch {batch}: {m.data_seconds_per_second:,.1f} "
                          "data-s/s", flush=True)
            if triton is None:
                continue
            repo = write_gpu_repository(load, Path(tmp) / f"{name}-repository",
                                        max_sequences=max(args.clients))
            with bench_server(repo, Path(tmp) / f"{name}-run", [GPU_PIPELINE, NETWORK]) as s:
                for batch in args.batch_sizes:
                    for k in args.clients:
                        for _ in range(args.repeats):
                            measurements.append(measure_service(
                                load, s, GPU_PIPELINE, batch, k, args.in_flight, args.seconds,
                                layout.threads,
                            ))
                            measurements.append(measure_naive(
                                load, s, batch, k, args.in_flight, args.seconds, layout.threads
                            ))
    elapsed = time.monotonic() - started
    command = "python benchmarks/gpu_bench.py " + " ".join(sys.argv[1:])
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = {"command": command, "started": when, "elapsed_seconds": round(elapsed, 1),
              "device": device, "machine": {**machine_description(), "gpu": device}}
    write_results(args.json, header, measurements)
    section = [
        f"## {device} — {when}", "",
        f"Command: `{command}` ({elapsed:.0f} s). "
        f"Triton: {'yes (' + str(triton) + ')' if triton else 'no (limit only)'}.", "",
        _table(device, measurements), "",
    ]
    with open(args.out, "a") as f:
        if f.tell() == 0:
            f.write("# GPU throughput (benchmarks/gpu_bench.py)\n\n")
        f.write("\n".join(section) + "\n")
    print(f"gpu_bench: appended to {args.out}, wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["deepclean", "toy"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[128, 512, 2048])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4096.0,
                        help="data seconds per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--triton", action="store_true",
                        help="also measure service and naive on a local Triton (container)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS-gpu.md")
    parser.add_argument("--json", type=Path, default=HERE / "results-gpu.json")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except OfflineIaasError as err:
        print(f"gpu_bench: error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
