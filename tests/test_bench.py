"""``offline-iaas bench`` and ``plan``: the snapshot windows, the capacity arithmetic, the
bench command on the campaign's repository, and the regression check of service/limit on a
real server (tiny workload)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.bench.regression import RegressionRatios, halved
from offline_iaas.bench.regression import main as regression_main
from offline_iaas.bench.results import Measurement, read_results, write_results
from offline_iaas.bench.targets import judge, missed_lines
from offline_iaas.bench.workloads import DEEPCLEAN, TINY, mode_workload, split_strides
from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.repository.backend.stateful import SnapshotState
from offline_iaas.serve.startup_checks import visible_gpus
from offline_iaas.sizing.plan import HEADROOM, plan_from_bench
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, processes_mentioning

REGRESSION_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "regression.json"
O3_CONFIG = resources.files("offline_iaas.campaigns").joinpath("o3-month-deepclean.toml")


@pytest.mark.parametrize("splits", [[4], [1, 3], [2, 1, 1]])
def test_snapshot_windows_into_a_batch_are_the_streams_windows(splits: list[int]) -> None:
    """``SnapshotState.windows_into`` (the fused model's and the limit's windowing) writes,
    whatever the split into updates, the windows of the stream preceded by a zero window."""
    channels, kernel, stride = 3, 16, 4
    data = np.random.default_rng(3).standard_normal((channels, sum(splits) * stride))
    data = data.astype(np.float32)
    stream = np.concatenate([np.zeros((channels, kernel), np.float32), data], axis=1)
    snap = SnapshotState(channels, kernel, stride)
    first = 0
    for n in splits:
        out = np.full((n, channels, kernel), np.nan, np.float32)
        snap.windows_into(data[:, first : first + n * stride], out)
        for j in range(n):
            end = kernel + first + (j + 1) * stride
            np.testing.assert_array_equal(out[j], stream[:, end - kernel : end])
        first += n * stride


def test_shares_cover_the_span_and_differ_by_at_most_one() -> None:
    shares = split_strides(103, 4)
    assert sum(shares) == 103
    assert max(shares) - min(shares) <= 1


def _results(path: Path, service_rates: dict[tuple, float | list[float]],
             name: str = "deepclean") -> Path:
    """A results.json of service measurements of workload ``name`` at (batch, clients) or
    (batch, clients, instances) points (2 instances unless given), one per rate listed."""
    measurements = [
        Measurement("service", name, point[0], point[1], (point + (2,))[2], data_seconds=100.0,
                    wall_seconds=100.0 / rate, client_cpu_seconds=1.0, server_cpu_seconds=1.0)
        for point, rates in service_rates.items()
        for rate in (rates if isinstance(rates, list) else [rates])
    ]
    return write_results(path, {"device": "cpu", "machine": {"cpu": "test", "cores": 2}},
                         measurements)


def _o3(overrides: list[str] = ()):
    with resources.as_file(O3_CONFIG) as path:
        return load_config(path, overrides)


def test_plan_scales_the_best_measured_point_to_the_campaign(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.json", {(8, 2): 60.0, (32, 4): 100.0, (128, 2): 80.0})
    config = _o3()
    hours = 2.0
    capacity = plan_from_bench(config, hours, results)
    # the bench measured the 2048 Hz DeepClean workload only (not o3-deepclean): the
    # campaign's windows are twice its (4096 Hz, 1 s) at the same rate and one more channel
    per_server = 100.0 * DEEPCLEAN.kernel_samples * DEEPCLEAN.channels / (
        config.kernel_samples * len(config.stream_channels))
    needed = config.data.duration / (hours * 3600)
    assert capacity.servers == math.ceil(needed * HEADROOM / per_server)
    assert (capacity.batch_size, capacity.clients_per_server) == (32, 4)
    assert capacity.hours <= hours
    assert plan_from_bench(config, hours / 2, results).servers > capacity.servers
    text = "\n".join(capacity.explanation)
    assert f"{needed:,.2f} data-s/s" in text and f"{per_server:,.2f}" in text


def test_plan_takes_the_rate_of_the_instances_it_recommends(tmp_path: Path) -> None:
    # the O3 workload itself, at 1 and 2 instances: 2 instances stream more per server
    results = _results(tmp_path / "results.json",
                       {(32, 2, 1): 30.0, (32, 2, 2): 53.0, (32, 4, 1): 29.0}, "o3-deepclean")
    both = plan_from_bench(_o3(), 24.0, results)
    assert (both.instances, both.per_server_rate) == (2, 53.0)
    assert "server.instances=2" in both.overrides()
    # a server that gets one core runs one instance: the one-instance rate, not the best
    one = plan_from_bench(_o3(["server.cpus=1"]), 24.0, results)
    assert (one.instances, one.clients_per_server, one.per_server_rate) == (1, 2, 30.0)
    assert "server.instances=1" in one.overrides()
    assert one.servers == math.ceil(2_592_000 / (24 * 3600) * HEADROOM / 30.0)
    assert one.servers > both.servers
    with pytest.raises(ConfigError, match="server.cpus"):
        plan_from_bench(_o3(["server.cpus=1"]), 24.0,
                        _results(tmp_path / "two.json", {(32, 2, 2): 53.0}, "o3-deepclean"))


def test_plan_uses_the_median_repeat_not_the_luckiest(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.json",
                       {(32, 2, 2): [20.0, 60.0, 22.0], (128, 2, 2): [30.0, 31.0, 29.0]},
                       "o3-deepclean")
    capacity = plan_from_bench(_o3(), 24.0, results)
    assert (capacity.batch_size, capacity.per_server_rate) == (128, 30.0)


def _at(path: str, clients: int, rate: float, cpu_seconds: float = 1.0) -> Measurement:
    """A bbhnet measurement at batch 128, 2 instances: 100 data seconds at ``rate``."""
    return Measurement(path, "bbhnet", 128, clients, 2, data_seconds=100.0,
                       wall_seconds=100.0 / rate, client_cpu_seconds=cpu_seconds)


def test_a_target_met_only_by_noise_is_not_met() -> None:
    # the limit beside the service at 2 clients had a bad moment (70-72); at 1 and 4 clients
    # the same batch ran at up to 100 data-s/s. The service's luckiest repeat (100) over the
    # limit beside it would pass 0.85; its median (70) over the best limit (100) does not.
    measurements = [
        _at("limit", 1, 100.0), _at("limit", 1, 95.0), _at("limit", 4, 90.0),
        _at("limit", 2, 70.0), _at("limit", 2, 72.0),
        _at("service", 2, 60.0, 2.0), _at("service", 2, 70.0, 2.0), _at("service", 2, 100.0, 2.0),
    ]
    check = next(c for c in judge(measurements, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    assert check.value == pytest.approx(0.70) and not check.met
    assert check.cpu_value == pytest.approx(0.5)  # 50 vs 100 data-s per CPU second
    assert check.service.text() == "70.0 [60.0–100.0] (3)"
    assert check.opponent.best == pytest.approx(100.0)
    # a service whose typical repeat meets the target against the best limit meets it
    steady = [*measurements[:5], *(_at("service", 2, r, 1.0) for r in (88.0, 90.0, 91.0))]
    check = next(c for c in judge(steady, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    assert check.value == pytest.approx(0.90) and check.met
    # NaN fails: no limit at this batch
    lonely = [_at("service", 2, 90.0)]
    check = next(c for c in judge(lonely, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    assert check.value != check.value and not check.met


def test_a_missed_target_says_what_its_judged_repeat_costs() -> None:
    # the limit's best: 100 data-s/s on 1 CPU second per 100 data seconds (10 ms per data-s);
    # the service's median repeat 70 data-s/s on 2 CPU seconds (20 ms): 10 / 0.85 = 11.76 ms
    # would meet it, 8.24 ms less
    limit = [_at("limit", 1, 100.0), _at("limit", 2, 90.0)]
    costly = [*limit, *(_at("service", 2, r, 2.0) for r in (60.0, 70.0, 80.0))]
    check = next(c for c in judge(costly, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    text = "\n".join(missed_lines(costly, check, 128, 2, []))
    assert "median repeat spends 20.00 ms" in text and "limit's best spends 10.00" in text
    assert "11.76 ms" in text and "8.24 ms less" in text and "met at no point" in text
    # as cheap per CPU second as the limit, slower per wall second: the cores, not the code
    cheap = [*limit, *(_at("service", 2, r, 1.0) for r in (60.0, 70.0, 80.0))]
    check = next(c for c in judge(cheap, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    text = "\n".join(missed_lines(cheap, check, 128, 2, ["batch 8"]))
    assert "within the target per CPU second (10.00 ms" in text and "ms less" not in text
    assert "met at batch 8 of the sweep" in text
    # a met target has nothing to say
    met = [*limit, *(_at("service", 2, r, 1.0) for r in (95.0, 96.0, 97.0))]
    check = next(c for c in judge(met, "bbhnet", 128, 2, 2) if c.name == "service/limit")
    assert check.met and missed_lines(met, check, 128, 2, []) == []


def test_a_streamed_service_is_judged_against_the_same_weights_served_whole_window() -> None:
    # the whole-window path spends 4 CPU seconds per 100 data seconds, the service 1
    whole = [replace(_at("whole-window", k, 30.0, 4.0), streamed=False) for k in (1, 2)]
    fast = [*whole, *(replace(_at("service", 2, r), streamed=True) for r in (95.0, 99.0, 120.0))]
    check = next(c for c in judge(fast, "bbhnet", 128, 2, 2)
                 if c.name == "service/whole-window")
    assert check.value == pytest.approx(99.0 / 30.0) and check.cpu_value == 4.0 and check.met
    slow = [*whole, *(replace(_at("service", 2, r), streamed=True) for r in (80.0, 85.0, 120.0))]
    check = next(c for c in judge(slow, "bbhnet", 128, 2, 2)
                 if c.name == "service/whole-window")
    assert check.value == pytest.approx(85.0 / 30.0) and not check.met
    # a workload not streamed yet has no whole-window path: missed, and said why
    alone = [_at("service", 2, 90.0)]
    check = next(c for c in judge(alone, "bbhnet", 128, 2, 2)
                 if c.name == "service/whole-window")
    assert not check.met
    (line,) = missed_lines(alone, check, 128, 2, [])
    assert "not served streamed yet" in line


def test_plan_takes_the_served_path_that_runs_the_networks_as_the_campaign_does(
        tmp_path: Path) -> None:
    """A streamed campaign is sized from the streamed service, a whole-window one from the
    same weights served whole-window; both measured in one bench run of a streamed
    workload."""
    measurements = [
        replace(_at("service", 2, 400.0), streamed=True),
        replace(_at("whole-window", 2, 100.0), streamed=False),
        replace(_at("limit", 2, 450.0), streamed=True),
    ]
    results = write_results(tmp_path / "results.json",
                            {"device": "cpu", "machine": {"cpu": "test", "cores": 2}},
                            measurements)
    source = tmp_path / "bbhnet.toml"
    source.write_text(SMALL_CAMPAIGN)
    geometry = ['model.mode="bbhnet"', "data.sample_rate=2048", "model.kernel_seconds=1.5",
                "model.inference_rate=4", 'data.channels=["H1:GDS-CALIB_STRAIN", '
                '"L1:GDS-CALIB_STRAIN"]', "data.duration=864000"]
    rates = {}
    for streamed in ("true", "false"):
        config = load_config(source, [*geometry, f"model.streamed={streamed}"])
        capacity = plan_from_bench(config, 24.0, results)
        rates[streamed] = capacity.per_server_rate
        assert "'bbhnet' workload's" in "\n".join(capacity.explanation)
    assert rates == {"true": 400.0, "false": 100.0}


def test_plan_refuses_a_bench_without_the_campaigns_workload(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results.json", {}, [
        Measurement("service", "toy", 32, 2, 2, 100.0, 1.0, 1.0, 1.0)
    ])
    config = _o3()
    with pytest.raises(ConfigError, match="deepclean"):
        plan_from_bench(config, 24.0, results)
    with pytest.raises(ConfigError, match="target-hours"):
        plan_from_bench(config, 0.0, results)


def test_the_bench_has_no_workload_of_a_mode_package_and_says_to_plan_from_a_pilot() -> None:
    """A mode from another distribution (``power``) has no bench workload: one ConfigError
    naming it and ``plan --from-run`` (before, a KeyError); a built-in mode has its own."""
    with pytest.raises(ConfigError, match=r"model.mode 'power': the bench has no workload .* "
                       r"plan --from-run RUN"):
        mode_workload("power", False)
    assert mode_workload("bbhnet", False).name == "bbhnet"  # control
    assert mode_workload("e2e", True).name == "e2e-inject"


def test_plan_command_prints_its_arithmetic(tmp_path: Path, capsys) -> None:
    results = _results(tmp_path / "results.json", {(32, 2): 50.0})
    with resources.as_file(O3_CONFIG) as path:
        code = main(["plan", str(path), "--target-hours", "24", "--from-bench", str(results)])
    out = capsys.readouterr().out
    assert code == 0
    assert "plan: needed: 2,592,000 data-s" in out
    assert "--set layout.servers=" in out and "--set model.batch_size=32" in out
    assert main(["plan", str(path), "--target-hours", "24", "--from-bench",
                 str(tmp_path / "missing.json")]) == exit_code(ConfigError)


@pytest.mark.parametrize("row_id, damage", [
    ("bench-results-not-json", lambda text: text[: len(text) // 2]),
    ("bench-results-no-measurements", lambda text: json.dumps(list(json.loads(text)))),
    ("bench-results-measurement-lacking", lambda text: text.replace('"wall_seconds"', '"w"')),
    ("bench-results-machine-not-an-object",
     lambda text: json.dumps({**json.loads(text), "machine": "AMD EPYC"})),
    (None, lambda text: json.dumps({**json.loads(text), "machine": None})),
    (None, lambda text: json.dumps({**json.loads(text), "machine": {"cores": "two"}})),
])
def test_a_damaged_bench_results_file_is_named_with_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture, row_id: str, damage) -> None:
    """A results file cut short, of another shape, or with a measurement lacking a field: one
    line naming the file and what is wrong, not Python's own words (a bare 'measurements'
    or 'list indices must be integers'); the undamaged file plans (the control)."""
    results = _results(tmp_path / "results.json", {(32, 2): 50.0})
    with resources.as_file(O3_CONFIG) as path:
        plan = ["plan", str(path), "--target-hours", "24", "--from-bench", str(results)]
        assert main(plan) == 0
        capsys.readouterr()
        results.write_text(damage(results.read_text()))
        assert main(plan) == exit_code(ConfigError)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(results) in err[0], err
    if row_id:
        documented(row_id, err[0].removeprefix("offline-iaas plan: error: "),
                   {tmp_path: "<ws>"}, exit_code=exit_code(ConfigError))


@pytest.mark.parametrize("row_id, fields, refusal", [
    ("bench-results-field-not-positive", {"wall_seconds": "fast"},
     "wall_seconds must be a positive finite number, got 'fast'"),
    (None, {"wall_seconds": 0.0}, "wall_seconds must be a positive finite number, got 0.0"),
    (None, {"wall_seconds": math.nan, "data_seconds_per_second": math.nan},
     "wall_seconds must be a positive finite number, got nan"),
    (None, {"data_seconds": -1.0}, "data_seconds must be a positive finite number, got -1.0"),
    (None, {"data_seconds": math.inf}, "data_seconds must be a positive finite number, got inf"),
    (None, {"server_cpu_seconds": -1}, "server_cpu_seconds must be a finite number, 0 or more, "
     "got -1"),
    ("bench-results-field-not-integer", {"batch_size": "big"},
     "batch_size must be a positive integer, got 'big'"),
    (None, {"clients": 2.5}, "clients must be a positive integer, got 2.5"),
    (None, {"threads": True}, "threads must be a positive integer, got True"),
    ("bench-results-layout-beyond-bound", {"threads": 1000000},  # recommended, before
     "threads must be at most 4096 (a layout plan would recommend), got 1000000"),
    (None, {"clients": 4097}, "clients must be at most 4096 (a layout plan would recommend), "
     "got 4097"),
    (None, {"bytes_sent": -1}, "bytes_sent must be an integer, 0 or more, got -1"),
    (None, {"streamed": 1}, "streamed must be true or false, got 1"),
    ("bench-results-rate-not-finite", {"data_seconds": 1e300, "wall_seconds": 1e-300},
     "data_seconds / wall_seconds must be a positive rate of at most 10**9, got 1e+300 / "
     "1e-300"),
    (None, {"data_seconds": 2048.0, "wall_seconds": 1e-300},  # a plan of 0 s, exit 0, before
     "data_seconds / wall_seconds must be a positive rate of at most 10**9, got 2048.0 / "
     "1e-300"),
])
def test_plan_refuses_a_bench_measurement_field_of_the_wrong_kind_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture, row_id: str | None,
        fields: dict[str, object], refusal: str) -> None:
    """A measurement whose time, count or rate is not a positive finite number (or integer):
    exit 2, one line naming the results file, the measurement and the field (before: a
    TypeError or ZeroDivisionError traceback, a negative or infinite plan, or the campaign's
    model.batch_size blamed); the undamaged file plans (the control) and stays as it was."""
    results = _results(tmp_path / "results.json", {(32, 2): 50.0})
    with resources.as_file(O3_CONFIG) as path:
        plan = ["plan", str(path), "--target-hours", "24", "--from-bench", str(results)]
        assert main(plan) == 0
        capsys.readouterr()
        data = json.loads(results.read_text())
        for row in data["measurements"]:
            row.update(fields)
        results.write_text(json.dumps(data))
        damaged = results.read_text()
        assert main(plan) == exit_code(ConfigError)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert err == [f"offline-iaas plan: error: {results}: not a bench results file (offline-iaas "
                   f"bench's results.json): measurement 1's {refusal}"], err
    assert captured.out == "" and results.read_text() == damaged
    if row_id:
        documented(row_id, err[0].removeprefix("offline-iaas plan: error: "),
                   {tmp_path: "<ws>"}, exit_code=exit_code(ConfigError))


def test_a_bench_results_number_of_too_many_digits_is_refused(tmp_path: Path) -> None:
    """An integer longer than Python reads from text: the file named (not a ValueError)."""
    results = _results(tmp_path / "results.json", {(32, 2): 50.0})
    assert read_results(results)[1][0].batch_size == 32  # control
    results.write_text(results.read_text().replace('"batch_size": 32', '"batch_size": 1'
                                                   + "0" * 5000))
    with pytest.raises(ConfigError, match=r"results.json: not a bench results file .*: a number "
                       "of too many digits to read$") as refused:
        read_results(results)
    documented("bench-results-number-too-long", str(refused.value), {tmp_path: "<ws>"},
               exit_code=exit_code(refused.value))


def test_plan_reads_the_source_trees_bench_results_from_any_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --from-bench, plan takes the checkout's benchmarks/results.json, whatever the
    working directory (not a path relative to it)."""
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "benchmarks").exists()
    capsys.readouterr()
    assert main(["plan", "campaign.toml", "--target-hours", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["from"] == str(REGRESSION_FILE.parent / "results.json")


def test_plan_without_bench_results_says_to_pass_a_source(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """An offline-iaas with no benchmarks/results.json of its own (a wheel): exit 2, one line
    saying to pass --from-bench FILE or --from-run RUN."""
    from offline_iaas.bench import results

    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    monkeypatch.setattr(results, "SOURCE_ROOT", tmp_path / "site-packages")
    capsys.readouterr()
    code = main(["plan", str(tmp_path / "campaign.toml"), "--target-hours", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exit_code(ConfigError) == 2
    assert len(err) == 1 and "pass --from-bench FILE" in err[0] and "--from-run RUN" in err[0]
    documented("plan-no-bench-results", err[0].removeprefix("offline-iaas plan: error: "),
               {tmp_path: "<ws>"}, exit_code=code)


@pytest.mark.parametrize("hours", ["0", "-1", "inf", "nan"])
def test_plan_refuses_a_target_that_is_not_a_positive_number_of_hours(
        small_config_file: Path, capsys: pytest.CaptureFixture, hours: str) -> None:
    capsys.readouterr()
    assert main(["plan", str(small_config_file), "--target-hours", hours]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"offline-iaas plan: error: --target-hours must be positive and finite, got "
        f"{float(hours):g}"]


def test_results_file_round_trips(tmp_path: Path) -> None:
    m = Measurement("naive", "toy", 8, 1, 2, 10.0, 2.0, 0.5, 1.5, 1000, 20, 0.1, {"x": 1})
    header, back = read_results(write_results(tmp_path / "r.json", {"k": 1}, [m]))
    assert header == {"k": 1} and back == [m]
    assert json.loads((tmp_path / "r.json").read_text())["measurements"][0][
        "data_seconds_per_second"] == 5.0


def test_a_ratio_below_half_the_recorded_one_is_a_regression() -> None:
    recorded = {"service_over_limit_wall": 0.5, "service_over_limit_cpu": 0.4}
    assert halved(RegressionRatios(wall=0.25, cpu=0.2), recorded) == []
    (line,) = halved(RegressionRatios(wall=0.249, cpu=0.2), recorded)
    assert line.startswith("service_over_limit_wall 0.249 ")
    (line,) = halved(RegressionRatios(wall=0.3, cpu=math.nan), recorded)
    assert line.startswith("service_over_limit_cpu nan ")


@pytest.mark.slow  # it starts a tritonserver
def test_the_regression_check_measures_on_a_real_server_and_prints_its_ratios(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check ``make bench-regression`` runs, against the recorded file's layout with
    ratios no machine can miss (how fast this one is is a benchmark's business, not a test's);
    the verdict itself is checked above."""
    recorded = json.loads(REGRESSION_FILE.read_text())
    reachable = tmp_path / "regression.json"
    reachable.write_text(json.dumps({**recorded, "service_over_limit_wall": 1e-9,
                                     "service_over_limit_cpu": 1e-9}))
    assert regression_main(["--check", str(reachable)]) == 0
    printed = dict(re.findall(r"^(service_over_limit_\w+): ([0-9.]+) ", capsys.readouterr().out,
                              re.MULTILINE))
    assert set(printed) == {"service_over_limit_wall", "service_over_limit_cpu"}
    # a sanity bound only: a loaded limit can lift the ratio above 1, never a thousandfold
    assert all(0 < float(value) < 1e3 for value in printed.values()), printed
    assert processes_mentioning("offline-iaas-regression-") == []


@pytest.mark.slow
def test_bench_command_writes_results_tables_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main([
        "bench", "--workloads", "tiny", "--batch-sizes", "16", "--clients", "1",
        "--batch-size", "16", "-k", "1", "--repeats", "1", "--data-scale", "0.5",
        "--instances", "1", "2", "--out", str(out), "--work-dir", str(tmp_path / "work"),
        "--device", "cpu",
    ])
    assert code == 0
    header, measurements = read_results(out / "results.json")
    # the GPU bench's own steps (benchmarks/GPU.md) on onnxruntime's CPU provider
    assert header["device"] == "cpu" and header["machine"]["gpu"] == "none"
    assert {m.path for m in measurements} == {"limit", "service", "naive"}
    # the limit at each swept instance count: one thread; two threads in both layouts (two
    # processes, one process)
    layouts = {n: sorted(m.extra["processes"] for m in measurements
                         if m.path == "limit" and m.threads == n) for n in (1, 2)}
    assert layouts == {1: [1], 2: [1, 2]}
    service = next(m for m in measurements if m.path == "service")
    # the service sends each sample once; the naive path every window whole (K/S = 8 times)
    naive = next(m for m in measurements if m.path == "naive")
    assert service.bytes_sent_per_data_second < 1.1 * TINY.input_bytes_per_data_second
    assert naive.bytes_sent_per_data_second > 7 * TINY.input_bytes_per_data_second
    assert service.server_cpu_seconds > 0 and service.client_cpu_seconds > 0
    text = (out / "RESULTS.md").read_text()
    assert header["command"] in text and "| tiny | 16 | 1 |" in text
    for name in ("throughput.png", "monitor.png", "monitor/tiny.csv"):
        assert (out / name).stat().st_size > 0
    assert processes_mentioning(str(tmp_path / "work")) == []
    (out / "RESULTS.md").unlink()
    assert main(["bench", "--report-only", "--out", str(out)]) == 0  # measures nothing
    redrawn = (out / "RESULTS.md").read_text()
    assert "the text redrawn from its results.json by `offline-iaas bench --report-only`" in redrawn
    assert re.sub(r"; the text redrawn .*? at commit `[^`]*`\.", ".", redrawn) == text


@pytest.mark.slow
def test_a_streamed_workload_is_measured_beside_its_weights_served_whole_window(
        tmp_path: Path) -> None:
    """aframe's geometry (issue #42): the service and the limit stream BBHnet layer by layer;
    the same weights exported with ``model.streamed = false`` and served are the
    ``whole-window`` path (its graphs in-process the ``whole-window-limit``), judged against
    with its own target."""
    out = tmp_path / "out"
    assert main(["bench", "--workloads", "aframe", "--batch-sizes", "128", "--clients", "1",
                 "--batch-size", "128", "-k", "1", "--repeats", "1", "--data-scale", "0.05",
                 "--instances", "1", "--out", str(out), "--work-dir", str(tmp_path / "work"),
                 "--device", "cpu"]) == 0
    _, measurements = read_results(out / "results.json")
    streamed = {m.path: m.streamed for m in measurements}
    assert streamed == {"limit": True, "service": True, "whole-window": False,
                        "whole-window-limit": False, "naive": False}
    manifests = {path.parent.name: json.loads(path.read_text())["streamed"]
                 for path in (tmp_path / "work").glob("aframe-*-repository/manifest.json")}
    assert manifests == {"aframe-cpu-fused-1-repository": {
        "bbhnet": "offline-iaas/1/bbhnet.streamed"}, "aframe-cpu-whole-1-repository": {},
        "aframe-cpu-ensemble-1-repository": {}}
    assert "| aframe | service/whole-window |" in (out / "RESULTS.md").read_text()
    assert processes_mentioning(str(tmp_path / "work")) == []


def test_gpu_bench_without_a_gpu_says_so_and_measures_nothing(tmp_path: Path, capsys) -> None:
    if visible_gpus() > 0:
        pytest.skip("this machine has a GPU: bench --device cuda would measure it")
    code = main(["bench", "--workloads", "tiny", "--device", "cuda", "--out", str(tmp_path)])
    assert code == 2
    assert "nvidia-smi -L lists none" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_o3_deepclean_workload_streams_the_o3_campaign_on_both_devices(tmp_path: Path) -> None:
    from offline_iaas.bench.sweep import SweepPlan, export_workload
    from offline_iaas.bench.workloads import O3_DEEPCLEAN, workload_of, write_weights
    from offline_iaas.manifest import read_manifest

    config = _o3()
    assert workload_of(config) == (O3_DEEPCLEAN, True)
    assert (O3_DEEPCLEAN.channels, O3_DEEPCLEAN.sample_rate_hz) == (21, 4096.0)  # witnesses
    assert (O3_DEEPCLEAN.kernel_samples, O3_DEEPCLEAN.stride_samples) == (
        config.kernel_samples, config.stride_samples)
    assert O3_DEEPCLEAN.batch_size == config.model.batch_size
    # the 2048 Hz workload is not the O3 campaign's stream
    assert workload_of(_o3(["data.sample_rate=2048"]))[0].name == "deepclean"
    pytest.importorskip("torch")
    weights = write_weights(O3_DEEPCLEAN, tmp_path / "weights")
    for device, flavor in (("cpu", "cpu"), ("cuda", "gpu")):
        exported = export_workload(O3_DEEPCLEAN, SweepPlan(device=device), tmp_path / device,
                                   weights, instances=1)
        manifest = read_manifest(exported.model.repository)
        assert (manifest.flavor, manifest.mode) == (flavor, "deepclean")


@pytest.mark.parametrize("option", [["--data-scale", "nan"], ["--data-scale", "-1"],
                                    ["--data-scale", "0"], ["--data-scale", "1e300"],
                                    ["--batch-size", "0"], ["--batch-sizes", "4097"],
                                    ["--instances", "1", "4097"]])
def test_a_bench_option_without_a_measurement_is_refused_before_any_server(
        option: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NaN, negative or absurd data per measurement, a batch size of 0: one line naming the
    option, exit 2, nothing written (NaN was a traceback once the servers had started, -1
    worker tracebacks, 0 a bench that never ended; a batch size of 0 meant the default)."""
    from offline_iaas.bench.sweep import SweepPlan
    from offline_iaas.cli import main

    code = main(["bench", "--workloads", "tiny", "--out", str(tmp_path / "b"), *option])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and option[0].lstrip("-").split("-")[-1] in line.replace("_", "-")
    assert not (tmp_path / "b").exists()
    if option == ["--data-scale", "nan"]:
        documented("bench-data-scale-not-positive",
                   line.removeprefix("offline-iaas bench: error: "), exit_code=code)
    SweepPlan(workloads=("tiny",), data_seconds={"tiny": 1.0}).check()  # control: a plan
