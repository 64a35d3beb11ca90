"""Streamed time slides: each detector whitened once, against every slide whitening its own.

``stateful.StreamedTimeSlides`` (what the fused model serves) whitens the two detectors once
(``split_whitening``) and streams each slide's layers on the whitened samples; the baseline
streams each slide as the whole network on its raw samples (what it did before). Both in this
process, on one thread, on the exported graphs (``open_streamed_network``), random weights
(``tests/test_streamed_bbhnet.random_bbhnet``, width 8, depth 3, 0.25 s whitening), 20 slides
of one window length, requests of 64 strides. Prints per geometry: CPU ms per window (all its
slides) of each, their ratio, the largest difference between the two over the slides
formed, relative to the largest statistic, and the stem's share of a slide's streamed
multiply-accumulates (``streamed.macs_per_window``): what forming the stem's per-detector
contributions once for all slides could save at most.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/streamed_slides.py [--slides 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from offline_iaas.repository.backend.layer_stream import strides  # noqa: E402
from offline_iaas.repository.backend.stateful import StreamedTimeSlides  # noqa: E402
from offline_iaas.repository.backend.streamed_network import open_streamed_network  # noqa: E402
from offline_iaas.science.bbhnet.streamed import (  # noqa: E402
    bbhnet_nodes,
    export_streamed,
    macs_per_window,
)
from tests.test_streamed_bbhnet import random_bbhnet  # noqa: E402

GEOMETRIES = (  # name, kernel, stride, whitening taps
    ("bench bbhnet: 2048 Hz, 1.5 s at 4 Hz", 3072, 512, 513),
    ("demo: 1024 Hz, 1 s at 8 Hz", 1024, 128, 257),
)
REQUEST_STRIDES, REQUESTS = 64, 6


def each_slide_whitening_its_own(runner, samples: np.ndarray, lags: np.ndarray,
                                 stride: int) -> np.ndarray:
    """The baseline: slide ``k`` the whole network on the first detector's raw samples beside
    the second's ``lags[k] S`` earlier; ``[windows * slides]`` as ``StreamedTimeSlides``."""
    states = [runner.initial_state() for _ in lags]
    delays = lags * stride
    past = np.zeros(int(delays[-1]), np.float32)
    out = []
    for at in range(0, samples.shape[1], REQUEST_STRIDES * stride):
        chunk = samples[:, at : at + REQUEST_STRIDES * stride]
        second, width = np.concatenate([past, chunk[1]]), chunk.shape[1]
        slides = np.empty((width // stride, len(lags)), np.float32)
        for k, (delay, state) in enumerate(zip(delays, states, strict=True)):
            start = len(past) - delay
            slides[:, k] = runner.update(state, np.stack([chunk[0],
                                                          second[start : start + width]]))
        past = second[len(second) - len(past) :].copy()
        out.append(slides.ravel())
    return np.concatenate(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slides", type=int, default=20)
    args = parser.parse_args()
    print(f"{'geometry':38} {'baseline ms/w':>13} {'served ms/w':>11} {'ratio':>6} "
          f"{'max rel. diff':>13} {'stem share':>10}")
    for name, kernel, stride, taps in GEOMETRIES:
        network = random_bbhnet(taps, 8, 3, kernel)
        with tempfile.TemporaryDirectory() as tmp:
            export_streamed(network, kernel, stride, Path(tmp) / "bbhnet")
            runner = open_streamed_network(Path(tmp) / "bbhnet")
        windows = REQUEST_STRIDES * REQUESTS
        samples = np.random.default_rng(0).standard_normal((2, windows * stride),
                                                           dtype=np.float32)
        lags = kernel // stride * np.arange(1, args.slides + 1)
        start = time.thread_time()
        baseline = each_slide_whitening_its_own(runner, samples, lags, stride)
        baseline_cpu = time.thread_time() - start
        served = StreamedTimeSlides(kernel // stride, args.slides, 0, stride, runner)
        start = time.thread_time()
        values = np.concatenate([served.update(samples[:, at : at + REQUEST_STRIDES * stride])
                                 for at in range(0, samples.shape[1],
                                                 REQUEST_STRIDES * stride)])
        served_cpu = time.thread_time() - start
        formed = np.isfinite(values)
        difference = np.max(np.abs(values[formed] - baseline[formed])) / np.max(
            np.abs(baseline[formed]))
        print(f"{name:38} {1e3 * baseline_cpu / windows:13.2f} "
              f"{1e3 * served_cpu / windows:11.2f} {baseline_cpu / served_cpu:6.2f} "
              f"{difference:13.2e} {_stem_share(network, kernel, stride):10.1%}")


def _stem_share(network, kernel: int, stride: int) -> float:
    """The stem's multiply-accumulates per window over a slide's streamed ones (its new
    outputs, ``S / 2`` of them; the whitening is shared already, not counted)."""
    nodes = bbhnet_nodes(network)
    stem = nodes[0].conv.macs_per_output * stride / strides(nodes)[nodes[0].name]
    macs = macs_per_window(network, kernel, stride)
    return stem / (macs["streamed"] - network.ifos * network.whitening_taps * stride)


if __name__ == "__main__":
    main()
