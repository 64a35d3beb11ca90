"""The trained demo networks: physics you can see, in process on held-out data and served in
the e2e demo by real servers.

The networks are trained once for the module (``demo_networks``) and serve both tests. On
held-out stretches, DeepClean removes the coupled 60 Hz line and leaves the rest of the spectrum
alone beyond a 2 Hz guard, and BBHnet finds at least 90 % of fresh injections of network SNR
>= 12 above the background's maximum. In the e2e demo (``run_demo`` with those weights),
DeepClean's cleaned/raw ASD <= 0.1 at the line and within 2 % of 1 beyond the guard, numbers
that are also recomputed here, with the span they are read over, from the frames and the output
by their definition; BBHnet on the cleaned strain finds at least 80 % of the injections of
network SNR >= 12 at the demo's IFAR threshold; VT counts the held-out injections, with the
population beside it, and the drawn volume does not bound it; found/missed, the VT curve and the
trigger counts are recomputed from the output, run.json and synth.json
(``tests/sensitivity_oracle.py``); the campaign equals the reference.

The held-out check of the networks in process (``test_demo_networks_do_their_physics``) is the
project's own evaluation (``science/e2e/evaluation.py``): a gate on the training, not an
oracle; the numbers the served demo quotes are the ones recomputed independently.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.demo import run_demo
from offline_iaas.models.numerics import run_in_child
from offline_iaas.models.training import train_demo
from offline_iaas.science.e2e.evaluation import PHYSICS_DATASET, evaluate_demo_networks
from tests.helpers import processes_mentioning
from tests.oracle import read_run_config, read_series, read_stretch
from tests.sensitivity_oracle import search_problems

pytestmark = pytest.mark.slow

TRAINING_THREADS = 1
"""The demo trains with two torch threads; the bounds below hold over 5 seeds x 1 and 2."""


@pytest.fixture(scope="module")
def demo_networks(tmp_path_factory: pytest.TempPathFactory) -> tuple[CampaignConfig, dict]:
    """The demo's networks, trained once as ``make demo`` trains them (``train_demo``, pinned
    numerics) but on one torch thread, and the dataset's config: the demo's 2048 s with the four
    injections of ``PHYSICS_DATASET``, away from the held-out stretches. The noise is the demo's
    to the sample (``synth.seed``, one stream per channel), so the e2e demo serves them on its
    own frames, whose injections they never trained on."""
    tmp = tmp_path_factory.mktemp("demo-networks")
    source = resources.files("offline_iaas.campaigns").joinpath("demo.toml")
    (tmp / "demo.toml").write_text(source.read_text())
    config = load_config(tmp / "demo.toml", list(PHYSICS_DATASET))
    write_synthetic_dataset(config)
    return config, train_demo(config, tmp / "weights", threads=TRAINING_THREADS)


# Bounds from the spread over 5 seeds x 1 and 2 torch threads on the IMRPhenomD data
# (benchmarks/demo_networks.py, table in docs/networks.md); a seed stands in for another CPU's
# rounding. Worst measured: line ratio 0.072 (bound 0.1), guarded deviation 0.0075 (bound
# 0.02), 38 of the 40 injections of network SNR >= 12 above the background's maximum (bound
# 36: 90 %; misses were at SNR 12, 20 and 30, the same two injections in most runs, so "every
# loud injection found" held on one CPU and failed on another). The unguarded band edges (up
# to 1.016) are not asserted: the docs do not expect them to hold.
LINE_RATIO_MAX = 0.1
GUARDED_DEVIATION_MAX = 0.02
HELD_OUT_LOUD_FOUND_MIN = 0.9


def test_demo_networks_do_their_physics(demo_networks: tuple[CampaignConfig, dict]) -> None:
    """The demo's DeepClean removes the 60 Hz line and leaves the rest of the spectrum alone
    beyond the 2 Hz guard; BBHnet finds at least 90 % of the injections of network SNR >= 12
    above the background's maximum.

    Held-out data of the demo dataset (2048 s, 1024 Hz): DeepClean trains on its first 256 s,
    BBHnet on its first 768 s (``science/e2e/evaluation.py``). Right at the band edges the
    ratio is not asserted: the coupling's side bands reach past them (docs/networks.md).
    The e2e demo below serves the same networks and asserts the same DeepClean bounds (and
    its own BBHnet bound).
    """
    config, paths = demo_networks
    summary = json.loads(paths["summary"].read_text())
    assert summary["networks"]["bbhnet"]["threads"] == TRAINING_THREADS
    # evaluated under the pin too, so that the numbers are the same bits on every x86-64-v3 CPU
    result = run_in_child(
        f"{evaluate_demo_networks.__module__}:{evaluate_demo_networks.__name__}",
        {"config": config, "frames": discover_frames(config.data), "paths": paths,
         "summary": summary})
    assert set(result["deepclean"]) == {"H1", "L1"}
    guarded = 0
    for ifo, rows in result["deepclean"].items():
        assert rows, ifo
        for row in rows:
            print(ifo, row)
            assert row["ratio_at_line"] <= LINE_RATIO_MAX
            if row["guard_hz"] >= 2.0:
                guarded += 1
                assert row["max_deviation_outside_band"] <= GUARDED_DEVIATION_MAX
    assert guarded > 0  # the deviation outside the band was checked somewhere
    bbhnet = result["bbhnet"]
    print({k: v for k, v in bbhnet.items() if k != "injections"})
    loud = [r for r in bbhnet["injections"] if r["network_snr"] >= 12]
    missed = [r for r in loud if not r["found"]]
    assert len(loud) >= 30
    assert len(loud) - len(missed) >= HELD_OUT_LOUD_FOUND_MIN * len(loud), (
        f"background max {bbhnet['background_max']:.2f}, missed {missed}")


DEMO_LOUD_FOUND_MIN = 0.8
"""The held-out check above missed up to 2 of 40 loud injections over 5 seeds x 2 thread counts
(docs/networks.md); the demo (96 injections drawn to z 3) has 11 in its analysed time, so 2
misses must not fail it."""


ASD_TOLERANCES = {"line_hz": (0.0, 0.0), "ratio_at_line": (1e-4, 0.0),
                  "max_ratio_in_band": (0.0, 5e-5), "min_ratio_outside_band": (0.0, 5e-5),
                  "max_ratio_outside_band": (0.0, 5e-5),
                  "max_deviation_outside_band": (0.0, 5e-5),
                  "max_deviation_at_band_edges": (0.0, 5e-5)}
ASD_MAX_SECONDS = 4096.0
"""At most this much cleaned strain per interferometer enters the ASD numbers (the report says
so in its caption)."""
"""(relative, absolute) per number. The merge subtracts its band-passed prediction in float64,
the file holds it in float32: on the demo (`make demo` at `5a8ce4e`) the ratio at the line
agreed within 2e-6 relative, and the largest deviation outside the band, the largest of ~2,000
median estimates (a ratio near 1), within 6.3e-6; the prediction one sample late moves the
ratio at the line from 0.024 to 0.37."""


def asd_numbers_by_definition(run_dir: Path, ifo: str, gps: tuple[float, float],
                              noise_late_samples: int = 0) -> dict[str, float]:
    """DeepClean's cleaned/raw ASD numbers of ``ifo`` over ``gps``, from the frames' raw strain
    (gwpy) less the ``noise/<ifo>`` the output holds (``noise_late_samples`` late: a control),
    by their definition with scipy (median Welch, Hann windows overlapping by half); no
    project code."""
    from scipy import signal

    config = read_run_config(run_dir)
    rate, d = float(config["data"]["sample_rate"]), config["deepclean"]
    channel = next(c for c in config["data"]["channels"] if c.startswith(f"{ifo}:"))
    raw = read_stretch(config, [channel], *gps)[0]
    pieces = []
    for x0, dx, values in read_series(run_dir / "output" / "campaign.h5")[f"noise/{ifo}"]:
        times = x0 + dx * np.arange(len(values))
        pieces.append(values[(times >= gps[0] - dx / 2) & (times < gps[1] - dx / 2)])
    noise = np.concatenate(pieces).astype(np.float64)
    assert len(noise) == len(raw), (len(noise), len(raw))
    noise = np.concatenate([np.zeros(noise_late_samples), noise])[: len(raw)]
    segment = int(float(d["asd_fftlength"]) * rate)
    freqs, raw_psd = signal.welch(raw, rate, window="hann", nperseg=segment, average="median")
    _, clean_psd = signal.welch(raw - noise, rate, window="hann", nperseg=segment,
                                average="median")
    ratio = np.sqrt(clean_psd / raw_psd)
    low, high, guard = float(d["band_low_hz"]), float(d["band_high_hz"]), float(d["guard_hz"])
    inside = (freqs >= low) & (freqs <= high)
    band = np.flatnonzero(inside)
    line = band[np.argmax(raw_psd[band])]
    outside = (freqs > 0) & ((freqs < low - guard) | (freqs > high + guard))
    edges = (freqs > 0) & ~inside & ~outside  # within the guard of an edge (a guard is set)
    return {"line_hz": float(freqs[line]), "ratio_at_line": float(ratio[line]),
            "max_ratio_in_band": float(ratio[inside].max()),
            "min_ratio_outside_band": float(ratio[outside].min()),
            "max_ratio_outside_band": float(ratio[outside].max()),
            "max_deviation_outside_band": float(np.abs(ratio[outside] - 1).max()),
            "max_deviation_at_band_edges": float(np.abs(ratio[edges] - 1).max())}


def held_out_gps(run_dir: Path, ifo: str, ignore_training: bool = False) -> tuple[float, float]:
    """The GPS span of ``ifo``'s cleaned strain the ASD numbers are read over, by its
    definition: the longest piece of the ``noise/<ifo>`` output outside the DeepClean's training
    span (``run.json``; ``ignore_training``: a control), the first of equal ones, cut to its
    first ``ASD_MAX_SECONDS``."""
    span = json.loads((run_dir / "run.json").read_text())["training"].get(f"deepclean-{ifo}")
    best = (0.0, 0.0)
    for x0, dx, values in read_series(run_dir / "output" / "campaign.h5")[f"noise/{ifo}"]:
        a, b = x0, x0 + len(values) * dx
        pieces = [(a, b)] if not span or ignore_training else [
            (a, min(b, span[0])), (max(a, span[1]), b)]
        for lo, hi in pieces:
            if hi - lo > best[1] - best[0]:
                best = (lo, hi)
    return best[0], min(best[1], best[0] + ASD_MAX_SECONDS)


def asd_problems(run_dir: Path, summary: dict, noise_late_samples: int = 0,
                 ignore_training: bool = False) -> list[str]:
    """Where the summary's DeepClean ASD numbers and their span differ from
    ``asd_numbers_by_definition`` over ``held_out_gps`` (the controls: theirs)."""
    problems = []
    for ifo, numbers in summary["deepclean"].items():
        gps = held_out_gps(run_dir, ifo, ignore_training)
        if numbers["held_out_gps"] != list(gps):
            problems.append(f"{ifo} held out: campaign {numbers['held_out_gps']}, here {gps}")
            continue
        here = asd_numbers_by_definition(run_dir, ifo, gps, noise_late_samples)
        for name, value in here.items():
            relative, absolute = ASD_TOLERANCES[name]
            if not np.isclose(numbers[name], value, rtol=relative, atol=absolute):
                problems.append(f"{ifo} {name}: campaign {numbers[name]}, here {value}")
    return problems


def test_e2e_demo_cleans_the_line_and_finds_loud_injections(
    tmp_path: Path, log_lines: list[str], demo_networks: tuple[CampaignConfig, dict]
) -> None:
    lines = log_lines
    _, paths = demo_networks
    try:
        worst = run_demo(tmp_path / "demo", mode="e2e", weights=paths["summary"].parent)
    finally:
        assert processes_mentioning(str(tmp_path)) == []
    assert worst <= 1e-5
    summary = json.loads((tmp_path / "demo" / "run" / "output" / "campaign.json").read_text())
    for ifo in ("H1", "L1"):
        numbers = summary["deepclean"][ifo]
        assert numbers["line_hz"] == pytest.approx(60.0, abs=0.5)
        assert numbers["ratio_at_line"] <= 0.1
        assert numbers["max_deviation_outside_band"] <= 0.02
    # the numbers from their definition, from the frames and the output (noise one sample
    # late: the control)
    run_dir = tmp_path / "demo" / "run"
    assert asd_problems(run_dir, summary) == []
    assert asd_problems(run_dir, summary, noise_late_samples=1) != []
    assert asd_problems(run_dir, summary, ignore_training=True) != []  # over training data
    # found/missed, VT, the held-out time and the trigger counts from the output, run.json and
    # synth.json (controls: the injections 5 s later; one trigger less)
    assert search_problems(run_dir) == []
    assert search_problems(run_dir, shift_injections=5.0) != []
    assert search_problems(run_dir, drop_triggers=1) != []
    for ifo in ("H1", "L1"):  # the trained DeepClean passes the gate in every GWF file
        gate = summary["deepclean_gate"][ifo]
        assert gate["files"] >= 30 and gate["files_flagged"] == 0, gate
    bbhnet = summary["bbhnet"]
    # every injection in the analysed time, the training span's too: a test of detection
    loud = [r for r in bbhnet["injections"] if r["network_snr"] >= 12]
    found = sum(r["found"] for r in loud)
    assert len(loud) >= 8 and found >= DEMO_LOUD_FOUND_MIN * len(loud), loud
    sensitivity = bbhnet["sensitivity"]
    counts = sensitivity["counts"]
    assert counts["in_training"] > 0 and counts["held_out"] == sensitivity["injections"] > 0
    assert sensitivity["population"]["redshift_max"] == 3.0
    assert sensitivity["population"]["drawn"] > sensitivity["population"]["injected"]
    reach = sensitivity["at_reach"]
    low, high = reach["vt_interval_gpc3_years"]
    assert 0 < low < reach["vt_gpc3_years"] < high
    assert sensitivity["at"]["1 year"]["vt_gpc3_years"] is None  # not measurable: null
    # z_max 3 lies beyond the horizon (z 2.79): nothing is found near it. (The SNR cut's
    # check is not asserted: the quietest found injection, SNR 5.3 at 34094bb against a bound
    # of 5.0, depends on the training, which differs between CPUs.)
    assert bbhnet["volume_bound"]["found_near_edge"] == 0
    assert any(line.startswith("BBHnet: ") and "SNR >= 12" in line for line in lines)
    assert any(line.startswith("BBHnet: injections: ") and "held out" in line for line in lines)
    assert any(line.startswith("BBHnet: population: IMRPhenomD") for line in lines)
    assert any(line.startswith("DeepClean H1: cleaned/raw ASD") for line in lines)
