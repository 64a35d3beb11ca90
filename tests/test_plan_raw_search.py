"""``plan`` and the bench count e2e's search on the raw strain (``search.inject``: BBHnet runs a
second time per window, ``pipeline.searches_raw_strain``): the bench's ``e2e-inject`` workload
serves that graph, ``plan`` takes its measurement or, without one, the ``e2e`` workload's with
the raw search estimated from the ``bbhnet`` workload's limit (``sizing/raw_search.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.bench.results import Measurement, write_results
from offline_iaas.bench.workloads import BBHNET, E2E, E2E_INJECT, workload_of
from offline_iaas.config import CampaignConfig, load_config, write_config
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.foreground import foreground_work
from offline_iaas.sizing.pilot import read_pilot
from offline_iaas.sizing.plan import plan_from_bench, plan_from_run
from offline_iaas.sizing.raw_search import window_work_per_data_second
from tests.error_catalogue import documented
from tests.helpers import WITNESSES
from tests.test_pilot import fake_pilot

E2E_RATE = 20.0
"""The ``e2e`` workload's service, data-s/s at batch 8, 2 clients, 2 instances."""
BBHNET_LIMIT = [1000.0, 1040.0, 900.0]
"""The ``bbhnet`` workload's limit repeats at batch 8, 2 instances (median 1000)."""


def service(name: str, rate: float, batch: int = 8, instances: int = 2) -> Measurement:
    return Measurement("service", name, batch, 2, instances, data_seconds=100.0,
                       wall_seconds=100.0 / rate, client_cpu_seconds=1.0, server_cpu_seconds=1.0)


def limit(rate: float, batch: int = 8, instances: int = 2, processes: int = 2) -> Measurement:
    return Measurement("limit", BBHNET.name, batch, 2, instances, data_seconds=100.0,
                       wall_seconds=100.0 / rate, client_cpu_seconds=1.0,
                       extra={"processes": processes, "threads_per_process": 1})


def results(path: Path, measurements: list[Measurement]) -> Path:
    return write_results(path, {"device": "cpu", "machine": {"cpu": "test", "cores": 2}},
                         measurements)


@pytest.fixture
def e2e(small_config_file: Path) -> list[str]:
    """Overrides of an e2e campaign over an hour with an injection every 30 s (not injected),
    its networks on whole windows (what the measurements below are)."""
    listed = small_config_file.parent / "injections.json"
    listed.write_text(json.dumps([{"gps_time": 1262304000 + 15.1 + 30 * j, "network_snr": 10.0}
                                  for j in range(120)]))
    return ['model.mode="e2e"', f"data.witnesses={WITNESSES}", "data.duration=3600",
            "model.streamed=false", f'search.injections="{listed}"']


def expected_raw_factor(config: CampaignConfig, rate_without: float) -> float:
    """1 + the campaign's rate without the raw search x BBHnet's seconds per data second on
    the raw strain: the bbhnet limit's median, scaled by window work, by hand."""
    bbhnet_work = 4.0 * round(1.5 * 2048) * 2  # 4 Hz, 1.5 s at 2048 Hz, H1+L1
    raw_work = config.model.inference_rate * config.kernel_samples * 2
    return 1 + rate_without * raw_work / bbhnet_work / 1000.0


def test_plan_counts_the_raw_search_of_an_e2e_campaign_with_injections(
        small_config_file: Path, e2e: list[str], tmp_path: Path) -> None:
    """Without an ``e2e-inject`` measurement the ``e2e`` workload's rate is divided by the
    raw search's estimate and the foreground's windows alike; without inject (the negative
    control) the rate is the e2e workload's, scaled by window work only, and no raw line."""
    bench = results(tmp_path / "results.json",
                    [service(E2E.name, E2E_RATE), *(limit(r) for r in BBHNET_LIMIT),
                     limit(10.0, batch=128), limit(5.0, processes=1)])
    plain_config = load_config(small_config_file, e2e)
    config = load_config(small_config_file, [*e2e, "search.inject=true"])
    plain = plan_from_bench(plain_config, 2.0, bench)
    injected = plan_from_bench(config, 2.0, bench)

    scaled = E2E_RATE * window_work_per_data_second(E2E.channels, 32.0, 2048) / (
        config.model.inference_rate * config.kernel_samples * len(config.stream_channels))
    assert plain.per_server_rate == pytest.approx(scaled, rel=1e-12)
    raw = expected_raw_factor(config, scaled)
    assert raw > 1.001  # the test can tell
    foreground = 1 + foreground_work(config).extra
    assert plain.per_server_rate / injected.per_server_rate == pytest.approx(
        raw * foreground, rel=1e-9)
    [line] = [line for line in injected.explanation if line.startswith("raw-strain search")]
    assert "median 1,000.0 data-s/s at batch 8, 2 instance(s)" in line
    assert f"= {raw:.3f}: per server {scaled / raw:,.2f} data-s/s" in line
    assert not any(line.startswith("raw-strain") for line in plain.explanation)
    # mode bbhnet with inject serves the same graph as without: no raw search
    bbhnet = load_config(small_config_file, ['model.mode="bbhnet"', e2e[-1], "search.inject=true"])
    assert workload_of(bbhnet)[0] is BBHNET


def test_plan_takes_the_e2e_inject_workload_s_measurement_over_the_estimate(
        small_config_file: Path, e2e: list[str], tmp_path: Path) -> None:
    bench = results(tmp_path / "results.json", [
        service(E2E.name, E2E_RATE), service(E2E_INJECT.name, 16.0),
        *(limit(r) for r in BBHNET_LIMIT)])
    config = load_config(small_config_file, [*e2e, "search.inject=true"])
    injected = plan_from_bench(config, 2.0, bench)
    scaled = 16.0 * window_work_per_data_second(E2E.channels, 32.0, 2048) / (
        config.model.inference_rate * config.kernel_samples * len(config.stream_channels))
    assert injected.per_server_rate == pytest.approx(
        scaled / (1 + foreground_work(config).extra), rel=1e-12)
    assert any(line.startswith("raw-strain search") and "measured, the 'e2e-inject' workload"
               in line for line in injected.explanation)
    # the e2e workload's rate is the campaign without inject's, whatever e2e-inject measured
    plain = plan_from_bench(load_config(small_config_file, e2e), 2.0, bench)
    assert plain.per_server_rate == pytest.approx(scaled * E2E_RATE / 16.0, rel=1e-12)


def test_plan_refuses_to_guess_the_raw_search_without_a_bbhnet_limit(
        small_config_file: Path, e2e: list[str], tmp_path: Path) -> None:
    """Only the e2e workload's service (and bbhnet's limit at other instances): no estimate
    of the raw search, so no plan, rather than the e2e rate as if it had none."""
    bench = results(tmp_path / "results.json", [service(E2E.name, E2E_RATE),
                                                 limit(1000.0, instances=1, processes=1)])
    config = load_config(small_config_file, [*e2e, "search.inject=true"])
    with pytest.raises(ConfigError) as caught:
        plan_from_bench(config, 2.0, bench)
    documented("plan-raw-search-unmeasured", str(caught.value), {tmp_path: "<ws>"},
               exit_code=exit_code(ConfigError))
    plan_from_bench(load_config(small_config_file, e2e), 2.0, bench)  # without inject: planned


def test_the_e2e_inject_workload_serves_e2e_s_graph_with_the_raw_search(tmp_path: Path) -> None:
    """What the bench exports for ``e2e-inject`` is a campaign's e2e repository with
    ``search.inject``: the same graph answers ``statistic_raw``, in-process too (the limit)."""
    pytest.importorskip("torch")
    import numpy as np

    from offline_iaas.bench.sweep import SweepPlan, export_workload
    from offline_iaas.bench.workloads import synthetic_samples, write_weights
    from offline_iaas.repository.pipeline import mode_stream
    from offline_iaas.repository.served import network_sessions

    assert workload_of(E2E_INJECT.config(tmp_path / "a")) == (E2E_INJECT, True)
    assert workload_of(E2E.config(tmp_path / "b")) == (E2E, True)
    weights = write_weights(E2E_INJECT, tmp_path / "weights")
    outputs = {}
    for load in (E2E, E2E_INJECT):
        config = export_workload(load, SweepPlan(), tmp_path / load.name, weights, 1)
        assert config.outputs.searches_raw_strain is load.inject
        stream = mode_stream(config, network_sessions(config))
        outputs[load.name] = stream.update(synthetic_samples(load, 4.0, 0))
    assert set(outputs["e2e-inject"]) - set(outputs["e2e"]) == {"statistic_raw"}
    np.testing.assert_array_equal(outputs["e2e-inject"]["statistic"],
                                  outputs["e2e"]["statistic"])
    # the raw search's statistic is not the cleaned one's (the subtraction changes the strain)
    assert not np.array_equal(outputs["e2e-inject"]["statistic_raw"],
                              outputs["e2e"]["statistic"])


def test_plan_from_run_refuses_a_pilot_without_the_raw_search(
        small_config_file: Path, e2e: list[str]) -> None:
    """A pilot of the e2e campaign without inject did not run the raw search: its rate is not
    the injecting campaign's (nor the reverse); a pilot that injects too is taken."""
    pilots = {}
    for inject in (False, True):
        config_file = small_config_file.parent / f"e2e-{inject}.toml"
        write_config(load_config(small_config_file, [*e2e, f"search.inject={inject}".lower()]),
                     config_file)
        pilots[inject] = read_pilot(RunDir(fake_pilot(config_file.with_suffix(""),
                                                      config_file)))
    injecting = load_config(small_config_file, [*e2e, "search.inject=true"])
    with pytest.raises(ConfigError, match="the e2e search on the raw strain"):
        plan_from_run(injecting, 1.0, pilots[False])
    with pytest.raises(ConfigError, match="the e2e search on the raw strain"):
        plan_from_run(load_config(small_config_file, e2e), 1.0, pilots[True])
    assert plan_from_run(injecting, 1.0, pilots[True]).per_server_rate > 0
