"""BBHnet streamed on its per-layer ONNX graphs against the whole-window ONNX graph (issue #42).

Both run by onnxruntime on one thread in this process: the whole-window graph on every window
(what the fused model does today), the streamed graphs (``repository/streamed.export_streamed``,
``backend/streamed_network.open_streamed_network``) on requests of ``--request`` strides. Random
weights (``tests/test_streamed_bbhnet.random_bbhnet``), width 8, depth 3, 0.25 s whitening;
two strides off BBHnet's grid of 16 (``PhasedNetwork``: one stream per phase).
Prints per geometry: windows, relative error of the streamed statistic against the whole-window
graph and against the network in float64, CPU seconds per window of each and their ratio.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/streamed_onnx.py [--seconds 60] [--request 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from offline_iaas.models.weights import export_onnx  # noqa: E402
from offline_iaas.repository.backend.streamed_network import open_streamed_network  # noqa: E402
from offline_iaas.science.bbhnet.streamed import export_streamed  # noqa: E402
from tests.helpers import relative_difference  # noqa: E402
from tests.test_streamed_bbhnet import (  # noqa: E402
    random_bbhnet,
    whole_statistics,
    whole_windows,
)

GEOMETRIES = (  # name, kernel, stride, whitening taps (2048 Hz but the last)
    ("bench bbhnet (1.5 s at 4 Hz)", 3072, 512, 513),
    ("aframe (1.5 s at 16 Hz)", 3072, 128, 513),
    ("off the grid: S 264, 2 phases", 3072, 264, 513),
    ("2000 Hz, 16 Hz: S 125, 16 ph.", 3000, 125, 501),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0, help="stream length (s)")
    parser.add_argument("--request", type=int, default=8, help="strides per request")
    args = parser.parse_args()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    print(f"{'geometry':30} {'windows':>7} {'rel. error':>10} {'vs float64':>10} "
          f"{'whole ms/w':>10} {'streamed ms/w':>13} {'whole/streamed':>14}")
    for name, kernel, stride, taps in GEOMETRIES:
        network = random_bbhnet(taps, 8, 3, kernel)
        with tempfile.TemporaryDirectory() as tmp:
            export_streamed(network, kernel, stride, Path(tmp) / "streamed")
            whole = onnxruntime.InferenceSession(
                str(export_onnx(network, Path(tmp) / "whole.onnx", "windows", "statistic",
                                (2, 2, kernel))), options, providers=["CPUExecutionProvider"])
            runner = open_streamed_network(Path(tmp) / "streamed")
            strides = int(args.seconds * 2048) // stride // args.request * args.request
            samples = np.random.default_rng(1).standard_normal((2, strides * stride),
                                                               dtype=np.float32)
            full = np.concatenate([np.zeros((2, kernel), np.float32), samples], axis=1)
            request = args.request * stride
            start = time.process_time()
            reference = np.concatenate([
                whole.run(None, {"windows": np.stack(
                    [full[:, a + (j + 1) * stride : a + (j + 1) * stride + kernel]
                     for j in range(args.request)])})[0]
                for a in range(0, samples.shape[1], request)])
            whole_cpu = time.process_time() - start
            state = runner.initial_state()
            start = time.process_time()
            values = np.concatenate([runner.update(state, samples[:, a : a + request])
                                     for a in range(0, samples.shape[1], request)])
            streamed_cpu = time.process_time() - start
        exact = whole_statistics(network, whole_windows(samples, kernel, stride))
        print(f"{name:30} {strides:7d} {relative_difference(values, reference):10.2e} "
              f"{relative_difference(values, exact):10.2e} "
              f"{1e3 * whole_cpu / strides:10.3f} {1e3 * streamed_cpu / strides:13.3f} "
              f"{whole_cpu / streamed_cpu:14.2f}")


if __name__ == "__main__":
    main()
