"""BBHnet's time slides formed on the server (issue #17): the stateful step slides the second
detector against the first from the one stream, the merge turns each slide's clustered
statistic into a background and every zero-lag trigger gets a false-alarm rate.

The campaigns are real (one tritonserver, two clients, run-local) and are checked against the
in-process reference and the independent oracle (tests/oracle.py), which cuts the slid windows
from the frames itself; a negative control moves the slides by one sample.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError, ModelError
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.physics import SECONDS_PER_YEAR, false_alarm_rates
from offline_iaas.repository.backend.stateful import TimeSlides
from offline_iaas.repository.export import check_repository, export_repository
from offline_iaas.rundir import RunDir
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, run_dag, untrained_weights
from tests.oracle import read_series, read_triggers, run_problems

TOLERANCE = 1e-4


# ---- the step and the arithmetic, without a server ------------------------------------------


def windows_by_hand(stream: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """Window j of a stream: samples ``[(j + 1) S - K, (j + 1) S)``, zeros before the start."""
    padded = np.concatenate([np.zeros((len(stream), kernel)), stream], axis=1)
    return np.stack([padded[:, (j + 1) * stride : (j + 1) * stride + kernel]
                     for j in range(stream.shape[1] // stride)])


def slid_by_hand(windows: np.ndarray, lag_windows: int, shifts: int, weights: np.ndarray
                 ) -> np.ndarray:
    """A linear "network" (``weights`` [2, K]) on the first detector's window j with the
    second's window ``j - k * lag_windows``; 0 where that is before the stream's first."""
    out = []
    for j in range(len(windows)):
        for k in range(1, shifts + 1):
            earlier = j - k * lag_windows
            if earlier < 0:
                out.append(0.0)
                continue
            pair = np.stack([windows[j, 0], windows[earlier, 1]])
            out.append(float((pair * weights).sum()))
    return np.array(out)


@pytest.mark.parametrize("sizes", [[40], [1, 39], [7, 3, 13, 17], [1] * 40])
def test_time_slides_pair_each_window_with_the_earlier_ones(sizes: list[int],
                                                            monkeypatch) -> None:
    kernel, stride, lag_windows, shifts = 32, 8, 2, 5
    monkeypatch.setattr(TimeSlides, "CHUNK_WINDOWS", 7)  # chunks that cut through windows
    rng = np.random.default_rng(1)
    stream = rng.normal(size=(2, 40 * stride))
    windows = windows_by_hand(stream, kernel, stride).astype(np.float32)
    weights = rng.normal(size=(2, kernel))

    def network(pairs: np.ndarray) -> np.ndarray:
        return (pairs * weights).sum(axis=(1, 2))

    slides = TimeSlides(lag_windows, shifts)
    position, got = 0, []
    for n in sizes:
        got.append(slides.update(windows[position : position + n], network))
        position += n
    got = np.concatenate(got)
    expected = slid_by_hand(windows, lag_windows, shifts, weights)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert (got[:shifts] == 0).all() and (got[-shifts:] != 0).all()
    # negative control: one window more of lag is another background
    other = slid_by_hand(windows, lag_windows + 1, shifts, weights)
    assert not np.allclose(got, other, rtol=1e-5, atol=1e-4)


def test_a_trigger_louder_than_the_whole_background_gets_one_over_the_livetime() -> None:
    far, ifar = false_alarm_rates(np.array([5.0, 2.0, 0.5]), np.array([1.0, 2.0, 3.0]), 100.0)
    # at least as loud: none (bounded to 1), 2.0 and 3.0, all three
    np.testing.assert_allclose(far, [1 / 100, 2 / 100, 3 / 100])
    np.testing.assert_allclose(ifar, 1 / far / SECONDS_PER_YEAR)


def test_time_shifts_need_a_bbhnet_mode_two_detectors_and_whole_samples(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    refusals = {}
    with pytest.raises(ConfigError, match="bbhnet.time_shifts.*BBHnet "
                       "mode") as refusals["time-slides-outside-bbhnet"]:
        load_config(tmp_path / "campaign.toml", ["bbhnet.time_shifts=3"])  # classifier
    bbhnet = ['model.mode="bbhnet"', "bbhnet.time_shifts=3"]
    with pytest.raises(ConfigError, match="bbhnet.shift_seconds.*whole number of "
                       "strides") as refusals["time-slides-not-whole-strides"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, "bbhnet.shift_seconds=0.3"])
    with pytest.raises(ConfigError, match="data.channels must name "
                       "two") as refusals["time-slides-one-detector"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, 'data.channels=["H1:X"]'])
    for row, caught in refusals.items():
        documented(row, str(caught.value), {tmp_path / "campaign.toml": "C"},
                   exit_code=ConfigError.exit_code)
    with pytest.raises(ConfigError, match="bbhnet.time_shifts.*negative"):
        load_config(tmp_path / "campaign.toml", ['model.mode="bbhnet"', "bbhnet.time_shifts=-1"])


def test_the_warm_up_grows_by_the_largest_slide(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)  # K = 256, S = 64 samples
    for mode, plain in (("bbhnet", 3), ("e2e", 9)):
        base = [f'model.mode="{mode}"', f"data.witnesses={WITNESSES}"]
        assert load_config(tmp_path / "campaign.toml", base).warmup_windows == plain
        # 5 slides of 0.5 s: 640 samples, 10 strides
        slid = load_config(tmp_path / "campaign.toml",
                           [*base, "bbhnet.time_shifts=5", "bbhnet.shift_seconds=0.5"])
        assert slid.warmup_windows == plain + 10


def test_the_ensemble_layout_refuses_time_slides(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', "bbhnet.time_shifts=2",
        f'model.repository="{tmp_path / "repo"}"'])
    with pytest.raises(ModelError, match="steps of the fused model") as caught:
        export_repository(config, None, ensemble=True)
    documented("ensemble-with-time-slides", str(caught.value), {tmp_path / "repo": "R"},
               exit_code=ModelError.exit_code)
    assert not (tmp_path / "repo").exists()


# ---- real campaigns ---------------------------------------------------------------------------


SHIFTS = 3


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """bbhnet with 3 slides and without, and e2e with 3 slides, on 32 s of frames."""
    root = tmp_path_factory.mktemp("slides")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN.replace("duration = 64", "duration = 32")
                                        .replace("injections = 1", "injections = 2"))
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    weights = untrained_weights(root / "weights")
    runs = {}
    for name, mode, shifts in (("bbhnet", "bbhnet", SHIFTS), ("plain", "bbhnet", 0),
                               ("e2e", "e2e", SHIFTS)):
        config = load_config(root / "campaign.toml", [
            f'model.mode="{mode}"', f"data.witnesses={WITNESSES}", "model.batch_size=5",
            f'model.repository="{root / name / "repository"}"',
            f"bbhnet.time_shifts={shifts}", "bbhnet.ifar_threshold_years=1e-6",
            f'bbhnet.injections="{root / "frames" / "synth.json"}"'])
        export_repository(config, weights)
        runs[name] = (config, run_dag(config, root / name / "run"))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bbhnet", "e2e"])
def test_a_time_slide_campaign_equals_its_reference_and_the_oracle(campaigns, name) -> None:
    config, run_dir = campaigns[name]
    campaign = run_dir / "output" / "campaign.h5"
    reference, _ = run_reference(config, run_dir.parent / "reference.h5")
    comparison = compare_outputs(campaign, reference)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert {"background/statistic", "triggers/far", "triggers/ifar"} <= set(comparison.relative)
    assert any(k.startswith("slides/") for k in comparison.relative)
    assert run_problems(run_dir) == []
    with h5py.File(campaign) as f:
        (slides,) = f["slides"].values()
        slides = slides[()]
        assert slides.shape[1] == SHIFTS and f["triggers"].dtype.names == (
            "time", "statistic", "far", "ifar")
        assert set(f["background"]["shift"]) == {1.0, 2.0, 3.0}
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    analysed = len(slides) * config.stride_seconds
    # the injections' neighbourhoods leave every slide's livetime (the oracle checks how much
    # through each FAR)
    assert 0 < summary["background_livetime_seconds"] < SHIFTS * analysed - 8
    assert summary["injections"] and all("ifar_years" in r for r in summary["injections"])


@pytest.mark.slow
def test_a_repository_exported_without_slides_is_refused(campaigns) -> None:
    slid, _ = campaigns["bbhnet"]
    plain, _ = campaigns["plain"]
    with pytest.raises(ModelError, match="exported with 0 time slides.*asks for 3") as caught:
        check_repository(dataclasses.replace(slid, model=plain.model))
    documented("repository-without-time-slides", str(caught.value),
               {plain.model.repository: "R"}, exit_code=ModelError.exit_code)


@pytest.mark.slow
def test_the_oracle_refuses_slides_one_sample_late_and_a_wrong_far(campaigns) -> None:
    _, run_dir = campaigns["bbhnet"]
    campaign = run_dir / "output" / "campaign.h5"
    series = read_series(campaign)
    late = copy.deepcopy(series)
    x0, dx, values = late["slides"][0]
    late["slides"][0] = (x0, dx, np.concatenate([values[:1], values[:-1]]))
    problems = run_problems(run_dir, series=late)
    assert problems and all(p.startswith("slides") for p in problems), problems
    triggers = read_triggers(campaign)
    triggers.far = triggers.far * 1.01
    assert run_problems(run_dir, triggers=triggers) == [
        "triggers: far relative error 0.01"]
    triggers = read_triggers(campaign)
    triggers.background["statistic"][0] = np.nan
    assert run_problems(run_dir, triggers=triggers) == [
        "background: statistic relative error inf"]


@pytest.mark.slow
def test_the_zero_lag_is_the_campaign_without_slides_over_the_same_windows(campaigns) -> None:
    """Slides change what is kept (a longer warm-up), never the zero-lag statistic."""
    _, slid = campaigns["bbhnet"]
    _, plain = campaigns["plain"]
    (with_slides,) = read_series(slid / "output" / "campaign.h5")["statistic"]
    (without,) = read_series(plain / "output" / "campaign.h5")["statistic"]
    later = round((with_slides[0] - without[0]) / without[1])
    assert later == SHIFTS * 4  # 3 slides of 1 s at 4 windows per second
    np.testing.assert_allclose(with_slides[2], without[2][later:], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_time_slides_send_no_more_bytes_per_streamed_second(campaigns) -> None:
    """The client sends each sample once whatever the slides; only the longer warm-up each
    piece streams again costs bytes (the same count of streamed seconds)."""
    sent = {}
    for name in ("bbhnet", "plain"):
        config, run_dir = campaigns[name]
        records = [json.loads(RunDir(run_dir).part(node)[1].read_text())
                   for node in RunDir(run_dir).read_run_info()["clients"]]
        jobs = [json.loads(RunDir(run_dir).job(node).read_text())
                for node in RunDir(run_dir).read_run_info()["clients"]]
        streamed = sum(p["gps_end"] - p["gps_start"] for job in jobs for p in job["pieces"])
        sent[name] = sum(r["tensor_bytes_sent"] for r in records) / streamed
    config = campaigns["plain"][0]
    per_second = len(config.stream_channels) * config.data.sample_rate * 4
    assert sent["bbhnet"] == sent["plain"] == per_second


def vt_problems(run_dir: Path, shift_injections: float = 0.0) -> list[str]:
    """The campaign's VT curve against one computed here from its triggers (time, IFAR),
    run.json's training span and synth.json (times, the population's volume, draws per
    injection), sharing no code with the merge: held out when in the analysed time and outside
    the training span; found at a threshold when a trigger within found_seconds has an IFAR at
    least it; N = held out x drawn / injected; thresholds beyond the background null."""
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())
    bbhnet = summary["bbhnet"]
    found_seconds = 1.0  # bbhnet.found_seconds' default
    with h5py.File(run_dir / "output" / "campaign.h5", "r") as f:
        times, ifars = f["triggers"]["time"], f["triggers"]["ifar"]
    synth = json.loads((run_dir.parent.parent / "frames" / "synth.json").read_text())
    population = synth["population"]
    volume = population["time_volume_gpc3"]
    training = json.loads((run_dir / "run.json").read_text()).get("training", {}).get("bbhnet")
    counted = {round(r["gps_time"], 6) for r in bbhnet["injections"]}  # in analysed time
    injected = [i["gps_time"] + shift_injections for i in synth["injections"]
                if round(i["gps_time"], 6) in counted
                and not (training and training[0] <= i["gps_time"] < training[1])]
    trials = len(injected) * population["drawn"] / population["injected"]
    years = bbhnet["analysed_seconds"] / (365.25 * 86400)
    reach = bbhnet["background_livetime_seconds"] / (365.25 * 86400)
    problems = []
    for point in bbhnet["sensitivity"]["curve"]:
        threshold = point["ifar_threshold_years"]
        if threshold > reach:
            if point["vt_gpc3_years"] is not None or point["found"] is not None:
                problems.append(f"IFAR {threshold:.3g} yr beyond the background: not null")
            continue
        found = sum(bool(np.any((np.abs(times - t) <= found_seconds) & (ifars >= threshold)))
                    for t in injected)
        vt = volume * years * found / trials
        if (point["found"], point["injections"]) != (found, len(injected)) or not np.isclose(
                point["vt_gpc3_years"], vt, rtol=1e-9, atol=0):
            problems.append(f"IFAR {threshold:.3g} yr: campaign {point['found']}/"
                            f"{point['injections']} VT {point['vt_gpc3_years']:.4g}, here "
                            f"{found}/{len(injected)} VT {vt:.4g}")
    return problems


@pytest.mark.slow
def test_the_sensitive_volume_follows_from_the_triggers_and_the_injections(campaigns) -> None:
    _, run_dir = campaigns["bbhnet"]
    bbhnet = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    found = [p["found"] for p in bbhnet["sensitivity"]["curve"] if p["measurable"]]
    assert max(found) > 0  # some injection is found at the lowest thresholds
    assert vt_problems(run_dir) == []
    assert vt_problems(run_dir, shift_injections=5.0) != []  # control: injections elsewhere


@pytest.mark.slow
def test_the_report_draws_the_cumulative_rate_in_a_browser(campaigns, tmp_path: Path) -> None:
    from offline_iaas.report.build import write_report
    from tests.browser import check_page, headless_chromium, missing_browser

    _, run_dir = campaigns["bbhnet"]
    report = write_report(RunDir(run_dir))
    text = report.read_text()
    assert "False-alarm rate" in text and "IFAR threshold [yr]" in text
    assert "Sensitivity" in text and "sensitive distance [Mpc]" in text
    why = missing_browser()
    if why is not None:
        pytest.skip(why)
    with headless_chromium() as driver:
        page = check_page(driver, report, tmp_path / "report.png")
    assert page.console == []
    shown = {i["alt"]: i for i in page.images}
    for alt in ("cumulative rate of background and zero-lag triggers",
                "sensitive time-volume against IFAR", "found and missed injections"):
        image = shown[alt]
        assert image["complete"] and image["naturalWidth"] > 0 and image["naturalHeight"] > 0


@pytest.mark.slow
def test_the_time_slide_bench_measures_both_paths_over_the_same_windows(tmp_path: Path) -> None:
    from offline_iaas.bench.timeslides import markdown, measure_time_slides
    from offline_iaas.bench.workloads import IFOS, Workload

    load = Workload("tiny-bbhnet", "bbhnet", IFOS, 0, 256.0, 1.0, 8.0, 16)
    server, client_side = measure_time_slides(tmp_path, load, shifts=3, shift_seconds=1.0,
                                              data_seconds=40.0, clients=2)
    assert server.slid_data_seconds == client_side.slid_data_seconds == 40.0 * 4
    # the client-side approach sends every sample once per lag; the server path once (and
    # the 3 s of warm-up per client)
    per_second = 2 * 256 * 4
    assert server.bytes_sent >= (40 + 2 * 3) * per_second
    assert client_side.bytes_sent >= 4 * 40 * per_second > 2.5 * server.bytes_sent
    text = markdown([server, client_side], load, 3, 1.0, 2, "the command")
    assert "| server |" in text and "| client-side |" in text and "bytes sent" in text
