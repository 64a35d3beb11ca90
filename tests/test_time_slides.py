"""BBHnet's time slides formed on the server (issue #17): the stateful step slides the second
detector against the first from the one stream, the merge turns each slide's clustered
statistic into a background and every zero-lag trigger gets a false-alarm rate.

The campaigns are real (one tritonserver, two clients, run-local) and are checked against the
in-process reference and the independent oracle (tests/oracle.py), which cuts the slid windows
from the frames itself; a negative control moves the slides by one sample. The step and the
arithmetic without a server: tests/test_time_slide_step.py.
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
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.records import read_run_info
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from offline_iaas.rundir import RunDir
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, run_dag, untrained_weights
from tests.oracle import (
    analysed_spans,
    own_triggers,
    read_run_config,
    read_series,
    read_triggers,
    run_problems,
)
from tests.search_spans import search_training, union
from tests.sensitivity_oracle import search_problems

TOLERANCE = 1e-4


# ---- real campaigns ---------------------------------------------------------------------------


SLIDES = 3
SLIDE_SECONDS = 3.0
TRAINING_SECONDS = 4.0
DEEPCLEAN_TRAINING = {"deepclean-H1": (12.0, 16.0), "deepclean-L1": (14.0, 18.0)}
"""DeepClean's training spans (seconds after the start), overlapping each other and not
BBHnet's: left out of e2e's search with BBHnet's, not of mode bbhnet's (no DeepClean there)."""
"""3 slides of 3 s (12 windows each) over 32 s split between 4 clients (about 31 kept windows
each): the second piece's history (36 windows) is clipped at the stretch's start, the
others' are whole."""


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """bbhnet with 3 slides and without, and e2e with 3 slides, on 32 s of frames, BBHnet's
    training span their last ``TRAINING_SECONDS``."""
    root = tmp_path_factory.mktemp("slides")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN.replace("duration = 64", "duration = 32")
                                        .replace("injections = 1", "injections = 2"))
    start = load_config(root / "campaign.toml").data.start
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    weights = untrained_weights(root / "weights")
    # BBHnet "trained" on the last seconds: the training span is cut from the background, VT's
    # T and the counted injections (training_summary.weights_training_spans reads this file)
    (weights / "demo-models.json").write_text(json.dumps({"networks": {
        "bbhnet": {"gps_start": start + 32 - TRAINING_SECONDS, "gps_end": start + 32},
        **{name: {"gps_start": start + a, "gps_end": start + b}
           for name, (a, b) in DEEPCLEAN_TRAINING.items()}}}))
    runs = {}
    for name, mode, shifts in (("bbhnet", "bbhnet", SLIDES), ("plain", "bbhnet", 0),
                               ("e2e", "e2e", SLIDES)):
        config = load_config(root / "campaign.toml", [
            f'model.mode="{mode}"', f"data.witnesses={WITNESSES}", "model.batch_size=5",
            "layout.clients_per_server=4",
            f'model.repository="{root / name / "repository"}"',
            f"search.slides={shifts}", f"search.slide_seconds={SLIDE_SECONDS}",
            "search.ifar_threshold_years=1e-6",
            f'search.injections="{root / "frames" / "synth.json"}"'])
        export_repository(config, weights)
        runs[name] = (config, run_dag(config, root / name / "run"))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bbhnet", "e2e"])
def test_a_time_slide_campaign_equals_its_reference_and_the_oracle(campaigns, name) -> None:
    config, run_dir = campaigns[name]
    pieces = [p for node in read_run_info(RunDir(run_dir)).clients
              for p in json.loads(RunDir(run_dir).job(node).read_text())["pieces"]]
    history = config.warmup_windows  # warm-up and the longest slide's history
    assert pieces[1]["output_start"] < history  # clipped at the stretch's start ...
    assert pieces[1]["first_window"] == 0 < pieces[2]["first_window"]  # ... and not
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
        assert slides.shape[1] == SLIDES and f["triggers"].dtype.names == (
            "time", "statistic", "far", "ifar", "outside_cuts")
        shifts = set(f["background"]["shift"])
        # every slide keeps time outside the two injections' cuts (synth spaces them for the
        # population's longest waveform, so e2e's later start no longer loses slides 2 and 3)
        assert shifts == {3.0, 6.0, 9.0}
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    step = round(SLIDE_SECONDS / config.stride_seconds)
    formed = np.isfinite(slides).sum()
    assert formed == sum(len(slides) - k * step for k in range(1, SLIDES + 1))
    livetime = own_triggers(run_dir, campaign).livetime_seconds  # its definition (the oracle's)
    assert 0 < livetime < formed * config.stride_seconds - 8  # the injections' cuts count
    assert [abs(summary["background_livetime_seconds"] - off - livetime) <= 1e-9 * livetime
            for off in (0.0, config.stride_seconds)] == [True, False]  # a stride off: fails
    assert summary["injections"] and all("ifar_years" in r for r in summary["injections"])


@pytest.mark.slow
def test_a_repository_exported_without_slides_is_refused(campaigns) -> None:
    slid, _ = campaigns["bbhnet"]
    plain, _ = campaigns["plain"]
    with pytest.raises(ModelError, match="exported with 0 time slides.*asks for 3") as caught:
        check_repository(dataclasses.replace(slid, model=plain.model))
    documented("repository-without-time-slides", str(caught.value),
               {plain.model.repository: "R"}, exit_code=exit_code(ModelError))


@pytest.mark.slow
def test_the_oracle_refuses_slides_one_sample_late_or_formed_elsewhere_and_a_wrong_far(
        campaigns) -> None:
    _, run_dir = campaigns["bbhnet"]
    campaign = run_dir / "output" / "campaign.h5"
    series = read_series(campaign)
    x0, dx, values = series["slides"][0]
    step = round(SLIDE_SECONDS / dx)
    early, missing = values.copy(), values.copy()
    early[2 * step - 1, 1] = values[2 * step, 1]  # slide 2 formed one window early
    missing[2 * step, 1] = np.nan  # ... or one window late
    for changed in (np.concatenate([values[:1], values[:-1]]), early, missing):
        wrong = copy.deepcopy(series)
        wrong["slides"][0] = (x0, dx, changed)
        problems = run_problems(run_dir, series=wrong)
        assert problems and all(p.startswith("slides") for p in problems), problems
    triggers = read_triggers(campaign)
    triggers.far = triggers.far * 1.01
    assert run_problems(run_dir, triggers=triggers) == [
        "triggers: far relative error 0.01"]
    triggers = read_triggers(campaign)
    triggers.background["statistic"][0] = np.nan
    assert run_problems(run_dir, triggers=triggers) == [
        "background: statistic relative error inf"]


def start_problems(series: dict, config) -> list[str]:
    """Where a one-stretch campaign's zero lag and slides start, against the definition
    (from the config's numbers only): the zero lag at the first window wholly inside the
    data (``ceil(K/S) - 1``, stamped at its end), slide k from ``k Δ`` later, then on every
    window."""
    rate = config.data.sample_rate
    kernel = round(config.model.kernel_seconds * rate)
    stride = round(rate / config.model.inference_rate)
    warmup = -(-kernel // stride) - 1
    step = round(config.search.slide_seconds * rate) // stride
    problems = []
    (x0, dx, statistic), = series["statistic"]
    expected = config.data.start + (warmup + 1) * stride / rate
    if not abs(x0 - expected) <= 1e-6:
        problems.append(f"the zero lag starts at {x0:.3f}, expected {expected:.3f}")
    (slides_x0, _, slides), = series["slides"]
    if slides_x0 != x0 or len(slides) != len(statistic):
        problems.append("the slides are not stamped like the zero lag")
    for k in range(1, slides.shape[1] + 1):
        formed = np.flatnonzero(np.isfinite(slides[:, k - 1]))
        if formed.tolist() != list(range(k * step, len(slides))):
            problems.append(f"slide {k} formed from row {formed[:1]}, expected {k * step}")
    return problems


@pytest.mark.slow
def test_the_zero_lag_starts_at_the_unslid_warm_up_and_slide_k_k_shifts_later(
        campaigns) -> None:
    config, run_dir = campaigns["bbhnet"]
    series = read_series(run_dir / "output" / "campaign.h5")
    assert start_problems(series, config) == []
    # negative controls: the zero lag one window late, a slide formed one window early
    late = copy.deepcopy(series)
    (x0, dx, values), = late["statistic"]
    late["statistic"] = [(x0 + dx, dx, values[1:])]
    assert start_problems(late, config)[0].startswith("the zero lag starts at")
    early = copy.deepcopy(series)
    slides = early["slides"][0][2]
    slides[2 * 12 - 1, 1] = slides[2 * 12, 1]
    assert start_problems(early, config) == ["slide 2 formed from row [23], expected 24"]


@pytest.mark.slow
def test_the_zero_lag_is_the_campaign_without_slides(campaigns) -> None:
    """Slides change nothing of the zero lag: the same windows, the same values."""
    _, slid = campaigns["bbhnet"]
    _, plain = campaigns["plain"]
    (with_slides,) = read_series(slid / "output" / "campaign.h5")["statistic"]
    (without,) = read_series(plain / "output" / "campaign.h5")["statistic"]
    assert with_slides[:2] == without[:2] and len(with_slides[2]) == len(without[2]) == 125
    assert np.isfinite(without[2]).all()
    np.testing.assert_allclose(with_slides[2], without[2], rtol=0, atol=1e-5)
    assert not np.allclose(with_slides[2][1:], without[2][:-1], rtol=0, atol=1e-5)  # control


@pytest.mark.slow
def test_time_slides_send_no_more_bytes_per_streamed_second(campaigns) -> None:
    """The client sends each sample once whatever the slides; only the history each piece
    inside the stretch streams again costs bytes (the same bytes per streamed second)."""
    sent, streamed = {}, {}
    for name in ("bbhnet", "plain"):
        config, run_dir = campaigns[name]
        records = [json.loads(RunDir(run_dir).part(node)[1].read_text())
                   for node in read_run_info(RunDir(run_dir)).clients]
        jobs = [json.loads(RunDir(run_dir).job(node).read_text())
                for node in read_run_info(RunDir(run_dir)).clients]
        streamed[name] = sum(p["gps_end"] - p["gps_start"] for job in jobs
                             for p in job["pieces"])
        sent[name] = sum(r["tensor_bytes_sent"] for r in records) / streamed[name]
    config = campaigns["plain"][0]
    per_second = len(config.stream_channels) * config.data.sample_rate * 4
    assert sent["bbhnet"] == sent["plain"] == per_second
    # the first piece streams no history, the second 31 windows (clipped), the others 36
    pieces = [p for job in jobs for p in job["pieces"]]
    extra = sum(min(36, p["output_start"] - 3) for p in pieces) * config.stride_seconds
    assert extra == (0 + 31 + 36 + 36) / 4
    assert streamed["bbhnet"] - streamed["plain"] == pytest.approx(extra, abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bbhnet", "e2e"])
def test_the_sensitive_volume_follows_from_the_triggers_and_the_injections(campaigns,
                                                                          name) -> None:
    config, run_dir = campaigns[name]
    bbhnet = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    found = [p["found"] for p in bbhnet["sensitivity"]["curve"] if p["measurable"]]
    assert max(found) > 0  # some injection is found at the lowest thresholds
    start = config.data.start
    truth = [start + 32 - TRAINING_SECONDS, start + 32]  # as written
    deepclean = {name: [start + a, start + b] for name, (a, b) in DEEPCLEAN_TRAINING.items()}
    recorded = [json.loads(p.read_text())["training"]  # the spans the oracles read
                for p in (run_dir / "run.json", config.model.repository / "manifest.json")]
    assert recorded == [{"bbhnet": truth, **deepclean}] * 2
    assert bbhnet["training_gps"] == truth
    assert bbhnet["training_spans_gps"] == {"bbhnet": truth, **(
        deepclean if name == "e2e" else {})}
    assert bbhnet["held_out_seconds"] < bbhnet["analysed_seconds"]
    assert search_problems(run_dir) == []
    if name == "bbhnet":  # control: injections elsewhere (in e2e's short background every
        # trigger near either place is louder than all of it: the same IFAR, its reach)
        assert search_problems(run_dir, shift_injections=5.0) != []
    else:  # control: DeepClean's spans not left out (the held-out time and the counts)
        assert search_problems(run_dir, ignore_networks=tuple(DEEPCLEAN_TRAINING)) != []
    # control: the analysed time (e2e's: its longer warm-up) one stride shorter at each end
    assert search_problems(run_dir, trim_seconds=config.stride_seconds) != []
    assert search_problems(run_dir, drop_triggers=1) != []  # control: the trigger counts


def zero_lag_problems(config, run_dir: Path, trim_seconds: float = 0.0) -> list[str]:
    """The zero lag's cut (the report's cumulative rate) from the output file, run.json's
    training span and synth.json, sharing no code with the merge: the cuts are
    ``exclusion_seconds`` around every injection and the training span; a trigger is outside
    them or not, and the zero lag's time is the analysed time less their union."""
    with h5py.File(run_dir / "output" / "campaign.h5", "r") as f:
        times, outside = f["triggers"]["time"], f["triggers"]["outside_cuts"]
        spans = analysed_spans(f, trim_seconds)
    listed = json.loads(config.search.injections.read_text())["injections"]
    exclusion = config.search.exclusion_seconds
    cuts = [(i["gps_time"] - exclusion, i["gps_time"] + exclusion) for i in listed]
    training = json.loads((run_dir / "run.json").read_text())["training"]
    cut = union(cuts + search_training(read_run_config(run_dir), training))
    seconds = sum(b - a - sum(max(0.0, min(b, d) - max(a, c)) for c, d in cut)
                  for a, b in spans)
    here = ~np.array([any(c <= t < d for c, d in cut) for t in times], bool)
    bbhnet = json.loads((run_dir / "output" / "campaign.json").read_text())["bbhnet"]
    problems = [] if np.isclose(bbhnet["zero_lag_livetime_seconds"], seconds, rtol=0,
                                atol=1e-6) else [
        f"zero lag's time: campaign {bbhnet['zero_lag_livetime_seconds']} s, here {seconds} s"]
    return problems + ([] if np.array_equal(outside, here) and 0 < here.sum() < len(here)
                       else [f"outside_cuts: campaign {outside.sum()}, here {here.sum()}"])


@pytest.mark.slow
def test_the_zero_lag_is_cut_as_the_background_is(campaigns) -> None:
    config, run_dir = campaigns["bbhnet"]
    assert zero_lag_problems(config, run_dir) == []
    # control: the analysed time one stride shorter at each end
    assert zero_lag_problems(config, run_dir, config.stride_seconds) != []


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
    server, client_side = measure_time_slides(tmp_path, load, slides=3, slide_seconds=1.0,
                                              data_seconds=40.0, clients=2)
    # 320 kept windows (K/S - 1 = 7 of warm-up); slide k is formed from 8 k windows on
    assert server.slid_data_seconds == client_side.slid_data_seconds == 40 + 39 + 38 + 37
    # the server path sends each sample once: the first piece after the stretch's warm-up,
    # the second after the warm-up and the longest slide's history (3 s); the client-side
    # path sends each slide's windows with their warm-up
    assert server.streamed_data_seconds == 40 + (7 + 7 + 24) / 8
    assert client_side.streamed_data_seconds == 154 + 8 * 7 / 8
    per_second = 2 * 256 * 4
    assert server.run.bytes_sent >= server.streamed_data_seconds * per_second
    assert client_side.run.bytes_sent >= 154 * per_second > 3 * server.run.bytes_sent
    text = markdown([server, client_side], load, 3, 1.0, 2)
    assert "| server |" in text and "| client-side |" in text and "bytes sent" in text
