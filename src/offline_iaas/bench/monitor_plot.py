"""Queue latency and throughput over time, from ``serve/monitor.py`` CSV files.

Each CSV holds one server's cumulative Triton counters, one row per model per poll. Between
consecutive polls of a model: requests per second (``inference_count``), and the mean queue
and compute (input + infer + output) time per request (``queue_ns`` and ``compute_*_ns`` over
``success_count``). Models that served nothing are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.serve.monitor import read_monitor_csv


@dataclass(frozen=True)
class ModelSeries:
    """One model's rates between the polls of one server."""

    server: str
    model: str
    unix_time: np.ndarray
    """Midpoints of the poll intervals."""
    requests_per_second: np.ndarray
    queue_ms: np.ndarray
    compute_ms: np.ndarray
    """Mean per request completed in the interval (NaN where none completed)."""


def monitor_series(path: Path) -> list[ModelSeries]:
    """The per-model series of one monitor CSV (the server is named after the file); models
    that served nothing are left out."""
    series = []
    for model, values in sorted(read_monitor_csv(path).items()):
        counts = values["inference_count"]
        if len(counts) < 2 or counts[-1] == counts[0]:
            continue
        t = values["unix_time"]
        dt = np.diff(t)
        done = np.diff(values["success_count"])
        compute = sum(
            np.diff(values[k]) for k in ("compute_input_ns", "compute_infer_ns",
                                         "compute_output_ns")
        )
        # nanoseconds summed over the interval's requests -> milliseconds per request
        ms_per_request_ns = np.where(done > 0, 1e-6 / np.maximum(done, 1), np.nan)
        series.append(ModelSeries(
            server=path.stem,
            model=model,
            unix_time=(t[1:] + t[:-1]) / 2,
            requests_per_second=np.diff(counts) / np.maximum(dt, 1e-9),
            queue_ms=np.diff(values["queue_ns"]) * ms_per_request_ns,
            compute_ms=compute * ms_per_request_ns,
        ))
    return series


def plot_monitor(csv_paths: list[Path], out_png: Path) -> Path:
    """Plot requests per second and mean queue/compute time per request against time.

    Parameters
    ----------
    csv_paths
        Monitor CSVs (``RUN/monitor/<server>.csv``), one per server.
    out_png
        The figure to write.

    Returns
    -------
    Path
        ``out_png``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [s for path in csv_paths for s in monitor_series(Path(path))]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    start = min((s.unix_time[0] for s in series), default=0.0)
    for s in series:
        label = f"{s.server}/{s.model}"
        t = s.unix_time - start
        top.plot(t, s.requests_per_second, label=label)
        (line,) = bottom.plot(t, s.queue_ms, label=f"{label} queue")
        bottom.plot(t, s.compute_ms, linestyle="--", color=line.get_color(),
                    label=f"{label} compute")
    top.set_ylabel("requests / s")
    bottom.set_ylabel("ms per request")
    bottom.set_xlabel("seconds since the first poll")
    top.set_title("Triton statistics over time (queue: solid, compute: dashed)")
    if not series:
        top.text(0.5, 0.5, "no model served a request", ha="center", transform=top.transAxes)
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
        if series:
            axis.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png
