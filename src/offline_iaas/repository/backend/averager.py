"""Online averaging of overlapping window predictions (DeepClean), one state per stream.

Depends on numpy only, like ``snapshotter.py``, so a python-backend model can use it; the gpu
flavor's ONNX graph (``repository.gpu_flavor.averager_onnx``) computes the same thing.

A stream's window ``j`` (``SnapshotState`` numbering) covers stream samples
``[(j + 1) S - K, (j + 1) S)``; with ``m = K / S`` (a whole number), every sample is covered by
``m`` windows. After window ``j`` the oldest stride of that window,
``[(j + 1) S - K, (j + 2) S - K)``, is covered by no later window: it is emitted as the sum of
its ``m`` predictions divided by ``m``. So ``update`` turns ``n`` window predictions into
``n * S`` averaged samples, ``K - S`` samples behind the windows' ends; the state is the
partial sums of the next ``K - S`` samples. The first ``m - 1`` strides a stream emits lie
before its first sample (they average in predictions of zero-filled windows) — the same
``warmup_windows`` a stream discards.
"""

from __future__ import annotations

import numpy as np


class OnlineAverage:
    """Averages a stream's overlapping window predictions as the windows arrive.

    Parameters
    ----------
    kernel_samples, stride_samples
        Window length ``K`` and stride ``S``; ``K`` must be a multiple of ``S`` and longer.
    """

    def __init__(self, kernel_samples: int, stride_samples: int) -> None:
        if kernel_samples % stride_samples or kernel_samples <= stride_samples:
            raise ValueError(
                f"online averaging needs a kernel ({kernel_samples}) that is a multiple of the "
                f"stride ({stride_samples}) and longer"
            )
        self.kernel_samples = kernel_samples
        self.stride_samples = stride_samples
        self.overlap = kernel_samples // stride_samples
        self.state = np.zeros(kernel_samples - stride_samples, dtype=np.float64)

    def update(self, predictions: np.ndarray) -> np.ndarray:
        """Add ``[n, K]`` window predictions; return the ``n * S`` samples now complete."""
        n, kernel = predictions.shape
        s = self.stride_samples
        if kernel != self.kernel_samples:
            raise ValueError(f"predictions of {kernel} samples, expected {self.kernel_samples}")
        total = np.zeros(n * s + kernel - s)
        total[: len(self.state)] += self.state
        for j in range(n):
            total[j * s : j * s + kernel] += predictions[j]
        self.state = total[n * s :].copy()
        return total[: n * s] / self.overlap
