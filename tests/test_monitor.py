"""Server monitoring: Triton statistics polled into ``RUN/monitor/<server>.csv`` and plotted."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offline_iaas.bench.monitor_plot import monitor_series, plot_monitor
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, RunError
from offline_iaas.rendezvous.addresses import read_address
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.serve.monitor import CSV_HEADER, ServerMonitor, statistics_rows
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import SMALL_CAMPAIGN, processes_mentioning, skip_data_check

HEADER_TEXT = (
    "unix_time,model,inference_count,execution_count,success_count,queue_ns,"
    "compute_input_ns,compute_infer_ns,compute_output_ns,success_ns"
)


def _stats(name: str, version: str, count: int, queue_ns: int) -> dict:
    """One model's entry as tritonclient's ``get_inference_statistics(as_json=True)`` has it."""
    return {
        "name": name, "version": version, "inference_count": str(count),
        "execution_count": str(count),
        "inference_stats": {
            "success": {"count": str(count), "ns": str(10 * queue_ns)},
            "queue": {"count": str(count), "ns": str(queue_ns)},
            "compute_infer": {"count": str(count), "ns": str(2 * queue_ns)},
            "fail": {}, "compute_input": {}, "compute_output": {},
        },
    }


def test_csv_header_is_the_agreed_one() -> None:
    assert ",".join(CSV_HEADER) == HEADER_TEXT


def test_rows_sum_a_models_versions_and_read_missing_counters_as_zero() -> None:
    stats = {"model_stats": [
        _stats("net", "1", 3, 100), _stats("net", "2", 4, 50),
        {"name": "idle", "version": "1", "inference_stats": {}},
    ]}
    rows = {r["model"]: r for r in statistics_rows(stats, 1234.5)}
    assert set(rows) == {"net", "idle"}
    assert rows["net"]["inference_count"] == 7 and rows["net"]["queue_ns"] == 150
    assert rows["net"]["compute_infer_ns"] == 300 and rows["net"]["compute_input_ns"] == 0
    assert rows["idle"]["success_count"] == 0 and rows["idle"]["unix_time"] == "1234.500"


class _FakeClient:
    def __init__(self, answers: list) -> None:
        self.answers = answers

    def get_inference_statistics(self, **kwargs):
        assert kwargs["headers"] == {"k": "v"} and kwargs["as_json"]
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_failed_poll_writes_nothing_and_later_polls_append(tmp_path: Path) -> None:
    path = tmp_path / "monitor" / "server0.csv"
    path.parent.mkdir()
    path.write_text(HEADER_TEXT + "\n")
    monitor = ServerMonitor({"k": "v"}, path, 60.0)  # polled by hand, not started
    client = _FakeClient([
        RuntimeError("server stopping"),
        {"model_stats": [_stats("net", "1", 1, 10)]},
        {"model_stats": [_stats("net", "1", 5, 90)]},
    ])
    assert [monitor.poll_once(client) for _ in range(3)] == [0, 1, 1]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["inference_count"] for r in rows] == ["1", "5"]
    assert (monitor.polls, monitor.failures) == (2, 1)


def test_interval_is_a_server_setting(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    assert load_config(tmp_path / "campaign.toml").server.monitor_seconds == 5.0
    assert load_config(tmp_path / "campaign.toml",
                       ["server.monitor_seconds=0.5"]).server.monitor_seconds == 0.5
    with pytest.raises(ConfigError, match="server.monitor_seconds"):
        load_config(tmp_path / "campaign.toml", ["server.monitor_seconds=-1"])


def test_plot_shows_rates_between_polls(tmp_path: Path) -> None:
    path = tmp_path / "server0.csv"
    lines = [HEADER_TEXT]
    for i, (count, queue_ns) in enumerate([(0, 0), (10, 5_000_000), (30, 45_000_000)]):
        lines.append(f"{100 + 2 * i}.000,net,{count},{count},{count},{queue_ns},0,0,0,0")
        lines.append(f"{100 + 2 * i}.000,idle,0,0,0,0,0,0,0,0")
    path.write_text("\n".join(lines) + "\n")
    (series,) = monitor_series(path)  # the idle model is left out
    assert series.model == "net" and series.server == "server0"
    assert series.requests_per_second.tolist() == [5.0, 10.0]
    assert series.queue_ms.tolist() == [0.5, 2.0]
    out = plot_monitor([path], tmp_path / "monitor.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(RunError, match="not a monitor CSV"):
        monitor_series(tmp_path / "other.csv")


@pytest.mark.slow
def test_serve_records_every_models_statistics(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml")
    export_repository(config)
    skip_data_check(monkeypatch)
    run_dir = tmp_path / "run"
    config = load_config(tmp_path / "campaign.toml", ["server.monitor_seconds=0.3"])
    make_dag(config, RunDir(run_dir))
    env = dict(os.environ)
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "offline_iaas.cli", "serve", "--run-dir", str(run_dir),
         "--node", "server0"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        start_new_session=True,
    )
    csv_path = run_dir / "monitor" / "server0.csv"
    try:
        deadline = time.monotonic() + 180
        while read_address(RunDir(run_dir), "server0") is None:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.25)
        while not csv_path.exists() or len(csv_path.read_text().splitlines()) < 7:
            assert time.monotonic() < deadline
            time.sleep(0.25)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        log.close()
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_HEADER
    models = {r["model"] for r in rows}
    assert models == {config.model.name}  # the fused model: the one model served
    assert processes_mentioning(str(run_dir)) == []


def test_the_report_s_monitor_figure_draws_a_server_without_polls_without_a_warning() -> None:
    """A server whose monitor CSV holds no poll (stopped at once) has no lines: its legend
    would be matplotlib's 'No artists with labels' warning on every report's stderr."""
    import warnings

    import numpy as np

    from offline_iaas.report.plots import monitor_figure
    from offline_iaas.report.timeline import MonitorRates

    polled = MonitorRates(np.array([1.0, 2.0]), np.array([10.0, 12.0]), np.array([0.5, 0.4]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = monitor_figure({"server0": {"offline-iaas": polled}, "server1": {}})
    assert png.startswith(b"\x89PNG")
