"""Multiply-accumulates per window: BBHnet on whole windows against BBHnet streamed.

``science/bbhnet/streamed.py`` (issue #42, work in progress): each layer once per stream
sample, each window's padded edges recomputed from two edge segments. Counts convolutions and
the head (``streamed.macs_per_window``) for BBHnet width 8, depth 3, 0.25 s whitening FIR, at the
bench's geometry, aframe's (1.5 s at 16 Hz, kernel/stride 24), the demo's, and one stride off
the downsampling grid (phase-separated streams). The figures in docs/networks.md ("Streamed
graphs") come from this script.

Usage: .venv/bin/python benchmarks/streamed_cost.py
"""

from __future__ import annotations

import argparse

import numpy as np

from offline_iaas.science.bbhnet.network import BBHnet, whitening_taps
from offline_iaas.science.bbhnet.streamed import macs_per_window

GEOMETRIES = (  # name, sample rate (Hz), kernel (s), inference rate (Hz)
    ("bench bbhnet", 2048.0, 1.5, 4.0),
    ("aframe (kernel/stride 24)", 2048.0, 1.5, 16.0),
    ("demo / bbhnet-search", 1024.0, 1.0, 8.0),
    ("off the grid: 2000 Hz at 16 Hz", 2000.0, 1.5, 16.0),
)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"{'geometry':32} {'K':>5} {'S':>4} {'T':>4} {'E':>4} {'whole':>9} {'streamed':>9} "
          f"{'layers':>9} {'edges':>9} {'L/R':>5} {'whole/streamed':>14} {'minimal edges':>13}")
    for name, rate, kernel_s, inference in GEOMETRIES:
        taps = whitening_taps(rate)
        kernel, stride = round(kernel_s * rate), round(rate / inference)
        network = BBHnet(2, np.ones((2, taps)), 1.0, width=8, depth=3)
        cost = macs_per_window(network, kernel, stride)
        minimal = cost["streamed_layers"] + cost["edge_lower_bound"]
        print(f"{name:32} {kernel:5d} {stride:4d} {taps:4d} {cost['edge_samples']:4d} "
              f"{cost['whole'] / 1e6:8.3f}M {cost['streamed'] / 1e6:8.3f}M "
              f"{cost['streamed_layers'] / 1e6:8.3f}M {cost['edges'] / 1e6:8.3f}M "
              f"{cost['left']:>2}/{cost['right']:<2} {cost['whole'] / cost['streamed']:14.2f} "
              f"{cost['whole'] / minimal:13.2f}")


if __name__ == "__main__":
    main()
