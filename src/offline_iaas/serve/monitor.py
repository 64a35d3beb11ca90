"""Server monitoring: Triton's per-model statistics, polled into ``RUN/monitor/<server>.csv``.

A background thread asks the server for its inference statistics (gRPC, with the run's token)
every ``interval_seconds`` and appends one row per model: Triton's cumulative counters as it
reports them (summed over the model's versions), stamped with the poll's Unix time. Rates and
mean latencies are differences between rows (``bench/monitor_plot.py``). A poll that fails (the
server is starting or stopping) writes nothing; the thread keeps going until stopped. A CSV
that is a FIFO whose reader left is closed, with one line on serve's log, and the server is
polled no more; serving goes on.

``server.monitor_seconds`` sets the interval of ``serve`` (default 5; 0 turns it off).
"""

from __future__ import annotations

import csv
import io
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.bounded_read import open_to_append_or, read_text
from offline_iaas.errors import RunError, ServerError

CSV_HEADER: tuple[str, ...] = (
    "unix_time",
    "model",
    "inference_count",
    "execution_count",
    "success_count",
    "queue_ns",
    "compute_input_ns",
    "compute_infer_ns",
    "compute_output_ns",
    "success_ns",
)
POLL_TIMEOUT_SECONDS = 5.0

logger = logging.getLogger(__name__)


def read_monitor_csv(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """A monitor CSV as ``model -> column -> values`` (rows in file order; a row cut short by
    a writer that was stopped is skipped). RunError, naming the file, when missing, no regular
    file (a FIFO, a device: refused before it is opened) or not a monitor CSV."""
    columns: dict[str, dict[str, list[float]]] = {}
    try:
        text = read_text(path, limit_bytes=None)  # grows with the campaign; a FIFO refused
    except FileNotFoundError:
        raise RunError(f"{path}: monitor CSV not found") from None
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        raise RunError(f"{path}: cannot read the monitor CSV: {err}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = tuple(h.strip() for h in next(reader, []))
    if header != CSV_HEADER:
        raise RunError(f"{path}: not a monitor CSV (header {','.join(header)})")
    for row in reader:
        if len(row) != len(CSV_HEADER):
            continue
        values = columns.setdefault(row[1], {k: [] for k in CSV_HEADER if k != "model"})
        try:
            for key, cell in zip(CSV_HEADER, row, strict=True):
                if key != "model":
                    values[key].append(float(cell))
        except ValueError as err:
            raise RunError(f"{path}: not a monitor CSV (line {reader.line_num}: {err})") from None
    return {model: {k: np.asarray(v) for k, v in cols.items()} for model, cols in columns.items()}


def statistics_rows(statistics: dict[str, Any], unix_time: float) -> list[dict[str, Any]]:
    """CSV rows of one ``get_inference_statistics(as_json=True)`` answer, one per model.

    Counters missing from the answer (protobuf leaves zeros out) are 0; a model's versions
    are summed.
    """
    totals: dict[str, dict[str, int]] = {}
    for model in statistics.get("model_stats", []):
        stats = model.get("inference_stats", {})

        def part(key: str, field: str, stats: dict = stats) -> int:
            return int(stats.get(key, {}).get(field, 0))

        values = {
            "inference_count": int(model.get("inference_count", 0)),
            "execution_count": int(model.get("execution_count", 0)),
            "success_count": part("success", "count"),
            "queue_ns": part("queue", "ns"),
            "compute_input_ns": part("compute_input", "ns"),
            "compute_infer_ns": part("compute_infer", "ns"),
            "compute_output_ns": part("compute_output", "ns"),
            "success_ns": part("success", "ns"),
        }
        total = totals.setdefault(model["name"], dict.fromkeys(values, 0))
        for key, value in values.items():
            total[key] += value
    return [
        {"unix_time": f"{unix_time:.3f}", "model": name, **values}
        for name, values in sorted(totals.items())
    ]


class ServerMonitor:
    """Polls one server's statistics into a CSV file from a daemon thread.

    Made with its CSV opened, kept open until ``stop`` (a FIFO's reader sees one stream, not
    one per poll), the header written to a new or empty one; a FIFO with no reader, a
    directory, a block device or a socket at ``csv_path``: ``ServerError`` naming it.
    ``serve`` makes it before tritonserver starts, so that nothing is started where it is
    refused, and ``start``s it with the server's address once it is ready.

    Parameters
    ----------
    headers
        gRPC headers of every call (the run's token: ``rendezvous.access.auth_headers``).
    csv_path
        The file rows are appended to (created with ``CSV_HEADER`` if absent).
    interval_seconds
        Time between polls.
    """

    def __init__(self, headers: dict[str, str], csv_path: Path, interval_seconds: float
                 ) -> None:
        self.headers = headers
        self.csv_path = Path(csv_path)
        self.interval_seconds = interval_seconds
        self.polls = 0
        self.failures = 0
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0  # a FIFO too
        self._out: io.TextIOWrapper | None = io.TextIOWrapper(
            open_to_append_or(self.csv_path, ServerError), newline="")
        if new:
            csv.writer(self._out).writerow(CSV_HEADER)
            self._out.flush()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, url: str) -> ServerMonitor:
        """Start polling the server at ``url`` (its gRPC address, ``host:port``)."""
        self._thread = threading.Thread(target=self._run, args=(url,), name="server-monitor",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take one last poll, end the thread, and close the CSV."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(POLL_TIMEOUT_SECONDS + 5)
        self._close()

    def poll_once(self, client) -> int:
        """Append the server's current statistics; return the rows written (0 on failure:
        the server starting, stopping or busy; a full disk; a FIFO's reader gone, after which
        the CSV is closed and nothing more is polled or written; after ``stop`` likewise)."""
        if self._out is None:
            return 0
        try:
            stats = client.get_inference_statistics(
                headers=self.headers, as_json=True, client_timeout=POLL_TIMEOUT_SECONDS
            )
        except Exception:  # starting, stopping or busy: try again at the next interval
            self.failures += 1
            return 0
        rows = statistics_rows(stats, time.time())
        try:
            csv.DictWriter(self._out, fieldnames=CSV_HEADER).writerows(rows)
            self._out.flush()
        except BrokenPipeError:  # the FIFO's reader has gone: no more rows; serving goes on
            self.failures += 1
            self._reader_left()
            return 0
        except OSError:  # a full disk: this poll's rows are lost, the next may be written
            self.failures += 1
            return 0
        self.polls += 1
        return len(rows)

    def _reader_left(self) -> None:
        """Close the CSV, a FIFO whose reader left (one line on serve's log saying so)."""
        logger.warning(f"{self.csv_path}: its reader left; the monitor writes no more rows "
                       "to it")
        self._close()

    def _close(self) -> None:
        """Close the CSV, if open; nothing more is written to it."""
        out, self._out = self._out, None
        try:
            if out is not None:
                out.close()
        except OSError:  # a FIFO's reader gone: what it was sent is lost with it
            pass

    def _run(self, url: str) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(url)
        try:
            while not self._stop.wait(self.interval_seconds):
                self.poll_once(client)
            self.poll_once(client)
        finally:
            client.close()


def start_monitor(
    url: str, headers: dict[str, str], csv_path: Path, interval_seconds: float
) -> ServerMonitor | None:
    """Start polling ``url`` into ``csv_path``; None when ``interval_seconds`` is 0."""
    monitor = open_monitor(headers, csv_path, interval_seconds)
    return monitor.start(url) if monitor is not None else None


def open_monitor(headers: dict[str, str], csv_path: Path, interval_seconds: float
                 ) -> ServerMonitor | None:
    """A monitor of a server not yet started, its CSV opened (it polls once ``start`` is
    given the server's address); None when ``interval_seconds`` is 0."""
    if interval_seconds <= 0:
        return None
    return ServerMonitor(headers, csv_path, interval_seconds)
