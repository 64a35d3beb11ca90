"""DeepClean streamed layer by layer against its whole-window ONNX graph (issue #42).

Per geometry: multiply-accumulates per window of the whole-window network and of the streamed
one (``science/deepclean/streamed.macs_per_window``), and CPU milliseconds per window of
each run by onnxruntime on one thread in this process: the whole-window graph on every window
(what the fused model does today), the streamed graphs (``export_streamed_deepclean``,
``backend/streamed_deepclean.open_streamed_deepclean``) on requests of ``--request``
strides; the least of ``--repeats`` runs of each.
Random weights and BatchNorm statistics, one interferometer with 21 witnesses; also prints the
relative error of the streamed prediction against the whole-window graph.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/streamed_deepclean.py [--seconds 16]
       [--request 8 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from offline_iaas.models.weights import export_onnx
from offline_iaas.science.deepclean.backend.streamed_deepclean import open_streamed_deepclean
from offline_iaas.science.deepclean.network import DeepClean
from offline_iaas.science.deepclean.streamed import export_streamed_deepclean, macs_per_window

WITNESSES = 21
GEOMETRIES = (  # name, sample rate (Hz), kernel (s), inference rate (Hz)
    ("o3-month-deepclean (4096 Hz, 1 s at 32 Hz)", 4096, 1.0, 32),
    ("bench deepclean (2048 Hz, 1 s at 32 Hz)", 2048, 1.0, 32),
)


def random_deepclean(seed: int = 0) -> DeepClean:
    """A DeepClean of ``WITNESSES`` witnesses with random weights and BatchNorm statistics."""
    torch.manual_seed(seed)
    network = DeepClean(WITNESSES, np.zeros(WITNESSES), np.ones(WITNESSES), 0.0, 1.0)
    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 2.0)
    return network.eval()


def by_window(session, full: np.ndarray, kernel: int, stride: int, count: int
              ) -> np.ndarray:
    """The whole-window graph on the windows of ``full`` (the stream, ``K`` zeros first),
    ``count`` windows per run."""
    return np.concatenate([
        session.run(None, {"windows": np.stack(
            [full[:, a + (j + 1) * stride : a + (j + 1) * stride + kernel]
             for j in range(count)])})[0]
        for a in range(0, full.shape[1] - kernel, count * stride)])


def by_stream(runner, state, samples: np.ndarray, request: int) -> np.ndarray:
    """The streamed graphs on ``samples`` from ``state``, ``request`` samples per update."""
    return np.concatenate([runner.update(state, samples[:, a : a + request])
                           for a in range(0, samples.shape[1], request)])[:, 0]


def cpu_seconds(calls: list) -> tuple[float, object]:
    """The least CPU time (this process; the machine is shared) of the ``calls`` (each a
    function and its arguments), and the last one's result."""
    best, result = float("inf"), None
    for function, *arguments in calls:
        start = time.process_time()
        result = function(*arguments)
        best = min(best, time.process_time() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=16.0, help="stream length (s)")
    parser.add_argument("--request", type=int, nargs="+", default=[8, 32],
                        help="strides per request")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (the least)")
    args = parser.parse_args()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    network = random_deepclean()
    print(f"{'geometry':44} {'K':>5} {'S':>4} {'whole MMAC':>10} {'streamed MMAC':>13} "
          f"{'(layers+edges)':>15} {'ratio':>6} {'request':>7} {'windows':>7} "
          f"{'rel. error':>10} {'whole ms/w':>10} {'streamed ms/w':>13} {'ratio':>6}")
    for name, rate, seconds, inference_rate in GEOMETRIES:
        kernel, stride = int(rate * seconds), rate // inference_rate
        macs = macs_per_window(network, kernel, stride)
        with tempfile.TemporaryDirectory() as tmp:
            export_streamed_deepclean({"H1": network}, {"H1": list(range(WITNESSES))}, kernel,
                                      stride, Path(tmp) / "streamed")
            whole = onnxruntime.InferenceSession(
                str(export_onnx(network, Path(tmp) / "whole.onnx", "windows", "prediction",
                                (2, WITNESSES, kernel))), options,
                providers=["CPUExecutionProvider"])
            runner = open_streamed_deepclean(Path(tmp) / "streamed", 1)
            for strides_per_request in args.request:
                strides = (int(args.seconds * rate) // stride // strides_per_request
                           * strides_per_request)
                samples = np.random.default_rng(1).standard_normal(
                    (WITNESSES, strides * stride), dtype=np.float32)
                full = np.concatenate([np.zeros((WITNESSES, kernel), np.float32), samples],
                                      axis=1)
                request = strides_per_request * stride

                whole_cpu, reference = cpu_seconds(
                    [(by_window, whole, full, kernel, stride, strides_per_request)]
                    * args.repeats)
                streamed_cpu, values = cpu_seconds(
                    [(by_stream, runner, runner.initial_state(), samples, request)
                     for _ in range(args.repeats)])
                error = np.abs(values - reference).max() / np.abs(reference).max()
                print(f"{name:44} {kernel:5d} {stride:4d} {macs['whole'] / 1e6:10.2f} "
                      f"{macs['streamed'] / 1e6:13.2f} "
                      f"{macs['streamed_layers'] / 1e6:7.2f}+{macs['edges'] / 1e6:<7.2f} "
                      f"{macs['whole'] / macs['streamed']:6.2f} {strides_per_request:7d} "
                      f"{strides:7d} {error:10.2e} {1e3 * whole_cpu / strides:10.3f} "
                      f"{1e3 * streamed_cpu / strides:13.3f} {whole_cpu / streamed_cpu:6.2f}")
    print(f"edge graphs' inputs: {macs['edge_samples']} samples, reach {macs['left']} / "
          f"{macs['right']} samples, alignment {macs['step']}")


if __name__ == "__main__":
    main()
