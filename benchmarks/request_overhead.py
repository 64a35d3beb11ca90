"""What one request costs beyond the step: the service against its limit, one sequence at a time.

The bench (``offline-iaas bench``) measures the service with ``k`` clients and the server's
instances sharing the machine's cores. This script takes them apart. For a workload it exports
the campaign's repository (the fused model, ``model.streamed`` as the workload sets it) with
seeded weights, starts tritonserver on it as the bench does, and streams one sequence from
this process through the campaign client's ``RequestStream`` (4 requests in flight), at each
batch size; it counts the CPU of this process (the client), of tritonserver's own process and
of its python stubs. Beside it, the limit's loop (``bench/limit.run_share``: the same step
in-process, no server) runs the same number of windows in a spawned process. Each side is
the least of 3 repeats. Per request it prints the CPU of each part, ``overhead`` = client +
tritonserver + stubs - the step, and the ceiling that overhead puts on ``service/limit`` per
CPU second: step / (step + overhead) (with nothing else on the cores; the bench's clients and
instances also slow each other).

``--transports grpc http`` also measures Triton's HTTP endpoint with a client of Python's own
``http.client`` (binary tensor data, one request in flight: the sequence's order needs it, and
Triton's HTTP frontend misread pipelined requests when tried), interleaved with the gRPC
client's repeats.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/request_overhead.py
           [--workload deepclean] [--batch-sizes 1 32 128] [--requests 300]
           [--transports grpc http]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import queue
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from offline_iaas.bench import accounting  # noqa: E402
from offline_iaas.bench.clients import RESPONSE_TIMEOUT_SECONDS  # noqa: E402
from offline_iaas.bench.limit import LimitJob, run_share  # noqa: E402
from offline_iaas.bench.server import bench_server  # noqa: E402
from offline_iaas.bench.workloads import synthetic_samples, workload, write_weights  # noqa: E402
from offline_iaas.client.transport import RequestStream  # noqa: E402
from offline_iaas.rendezvous.access import TOKEN_HEADER, read_token  # noqa: E402
from offline_iaas.repository.export import export_repository  # noqa: E402
from offline_iaas.rundir import RunDir  # noqa: E402

IN_FLIGHT = 4


def _limit_ms_per_request(name: str, repository: str, batch_size: int, requests: int,
                          out) -> None:
    """In a spawned process: CPU ms per request of the limit's loop (best of 3)."""
    load = workload(name)
    config = load.config(Path(repository), instances=1, clients=1)
    seconds = requests * batch_size * load.stride_samples / load.sample_rate_hz
    job = LimitJob(load, config, batch_size, seconds, seed=1)
    sessions = job.open()
    samples = synthetic_samples(load, seconds, 1)
    best = np.inf
    for _ in range(3):
        before = time.process_time()
        run_share(sessions, config, samples, batch_size)
        best = min(best, (time.process_time() - before) / requests * 1e3)
    out.put(best)


def limit_ms_per_request(name: str, repository: Path, batch_size: int, requests: int) -> float:
    """The limit's CPU ms per request, from a spawned process (stopped on any failure)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    proc = context.Process(target=_limit_ms_per_request,
                           args=(name, str(repository), batch_size, requests, out))
    proc.start()
    try:
        while True:
            try:
                return out.get(timeout=1.0)
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"the limit's process exited with {proc.exitcode}"
                                       ) from None
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
            proc.join()


def grpc_ms_per_request(server, config, load, batch_size: int, requests: int,
                        sequence_id: int) -> tuple[float, float, float]:
    """CPU ms per request of the campaign client's gRPC stream (``RequestStream``), tritonserver's
    own process and its stubs."""
    import tritonclient.grpc as grpcclient

    update = synthetic_samples(load, requests * batch_size * load.stride_samples
                               / load.sample_rate_hz, 2)
    step = batch_size * load.stride_samples
    client = grpcclient.InferenceServerClient(server.url)
    outputs = tuple(config.outputs.names)
    try:
        with RequestStream(client, config.model.name, outputs, IN_FLIGHT,
                           RESPONSE_TIMEOUT_SECONDS, server.headers,
                           lambda _id, result: [result.as_numpy(o) for o in outputs],
                           server.url) as stream:
            def send_all() -> None:
                pieces = ({"update": update[:, index * step:(index + 1) * step]}
                          for index in range(requests))
                for _ in stream.send_piece(pieces, requests, "0", sequence_id):
                    pass
                stream.drain()

            return cpu_ms_per_request(server, requests, send_all)
    finally:
        client.close()


def cpu_ms_per_request(server, requests: int, send_all: Callable[[], None]
                       ) -> tuple[float, float, float]:
    """CPU ms per request of this process, tritonserver's own process and its stubs while
    ``send_all`` sends ``requests`` requests and reads their answers."""
    stubs = accounting.children_of(server.pid)
    own, triton, stub = (time.process_time(), accounting.cpu_seconds(server.pid),
                         accounting.tree_cpu_seconds(stubs))
    send_all()
    return ((time.process_time() - own) / requests * 1e3,
            (accounting.cpu_seconds(server.pid) - triton) / requests * 1e3,
            (accounting.tree_cpu_seconds(stubs) - stub) / requests * 1e3)


def _http_request(connection: http.client.HTTPConnection, path: str, token: str,
                  update: np.ndarray, outputs: tuple[str, ...], sequence_id: int,
                  start: bool, end: bool) -> list[np.ndarray]:
    """One inference request over HTTP with binary tensor data; the outputs' arrays."""
    header = json.dumps({
        "parameters": {"sequence_id": sequence_id, "sequence_start": start,
                       "sequence_end": end},
        "inputs": [{"name": "update", "shape": list(update.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": update.nbytes}}],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }).encode()
    connection.request("POST", path, body=header + update.tobytes(), headers={
        TOKEN_HEADER: token, "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream"})
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
    header_bytes = int(response.getheader("Inference-Header-Content-Length"))
    offset, arrays = header_bytes, []
    for output in json.loads(body[:header_bytes])["outputs"]:
        size = output["parameters"]["binary_data_size"]
        arrays.append(np.frombuffer(body[offset:offset + size], np.float32)
                      .reshape(output["shape"]))
        offset += size
    return arrays


def http_ms_per_request(server, config, load, batch_size: int, requests: int,
                        sequence_id: int) -> tuple[float, float, float]:
    """As ``grpc_ms_per_request``, the client being ``http.client`` on Triton's HTTP port."""
    update = synthetic_samples(load, requests * batch_size * load.stride_samples
                               / load.sample_rate_hz, 2)
    step = batch_size * load.stride_samples
    outputs = tuple(config.outputs.names)
    path, token = f"/v2/models/{config.model.name}/infer", read_token(server.run) or ""
    connection = http.client.HTTPConnection("127.0.0.1", server.ports.http,
                                            timeout=RESPONSE_TIMEOUT_SECONDS)
    def send_all() -> None:
        for index in range(requests):
            _http_request(connection, path, token,
                          update[None, :, index * step:(index + 1) * step], outputs,
                          sequence_id, index == 0, index == requests - 1)

    try:
        return cpu_ms_per_request(server, requests, send_all)
    finally:
        connection.close()


SERVED = {"grpc": grpc_ms_per_request, "http": http_ms_per_request}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="deepclean")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--requests", type=int, default=300,
                        help="requests at batch 32 (scaled inversely with the batch size)")
    parser.add_argument("--transports", nargs="+", choices=sorted(SERVED), default=["grpc"])
    args = parser.parse_args()
    load = workload(args.workload)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repository = work / "repository"
        config = load.config(repository, instances=1, clients=1)
        export_repository(config, write_weights(load, work / "weights"))
        print(f"{load.name}: {load.channels} channels at {load.sample_rate_hz:g} Hz, stride "
              f"{load.stride_samples} samples; one sequence (gRPC: {IN_FLIGHT} requests in "
              "flight; HTTP: one), one instance; CPU ms per request")
        print("| transport | batch | request bytes | client | tritonserver | stubs | "
              "limit's step | overhead | ceiling of service/limit |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        with bench_server(repository, RunDir(work / "run"), [config.model.name]) as server:
            for index, batch in enumerate(args.batch_sizes):
                requests = max(20, args.requests * 32 // batch)
                sequence_ids = iter(range(100 + 100 * index, 200 + 100 * index))
                for transport in args.transports:  # warm
                    SERVED[transport](server, config, load, batch, 10, next(sequence_ids))
                # the least of 3, as the limit's step (one sequence ID per stream), the
                # transports' repeats interleaved
                repeats: dict[str, list[tuple[float, float, float]]] = {
                    transport: [] for transport in args.transports}
                for _ in range(3):
                    for transport in args.transports:
                        repeats[transport].append(SERVED[transport](
                            server, config, load, batch, requests, next(sequence_ids)))
                step = limit_ms_per_request(load.name, repository, batch, requests)
                nbytes = load.channels * batch * load.stride_samples * 4
                for transport in args.transports:
                    client, triton, stubs = min(repeats[transport], key=sum)
                    overhead = client + triton + stubs - step
                    print(f"| {transport} | {batch} | {nbytes:,} | {client:.3f} | "
                          f"{triton:.3f} | {stubs:.3f} | {step:.3f} | {overhead:.3f} | "
                          f"{step / (step + overhead):.3f} |", flush=True)


if __name__ == "__main__":
    main()
