"""The numbers the summary quotes of BBHnet's search (the loudest trigger's IFAR, VT with its
Jeffreys interval, the sensitive distance with its interval) recomputed from what the merge
writes: the ``triggers`` and ``background`` tables of the campaign file, the ``bbhnet``
section of ``campaign.json`` (its held-out time ``T``; its livetime ``L`` is recomputed too,
``livetime_by_definition``), and the injection list. The merge
(``products.search_summary``) runs on a constructed set of triggers, background and
injections; the oracle here imports nothing from the project and computes
each number from its definition:

- IFAR of a trigger of statistic ``s``: ``L / (1 + #{background >= s})`` in Julian years; the
  loudest is the largest;
- an injection held out (outside BBHnet's training span) is found at a threshold when a
  trigger within ``found_seconds`` has an IFAR at least it; ``N = held out x drawn /
  injected``; ``VT = V T found / N``;
- the interval: Beta(found + 1/2, N - found + 1/2)'s equal-tailed 68.27 % quantiles
  (``scipy.stats.beta(...).interval``), 0 below when none is found, 1 above when all are;
- the sensitive distance: ``(3 VT / (4 pi T))^(1/3)`` (Mpc), its interval from VT's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
from scipy import stats

from offline_iaas.config import config_from_dict
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.science.bbhnet.products import (
    BACKGROUND_COLUMNS,
    TRIGGER_COLUMNS,
    search_summary,
)
from offline_iaas.stretches import make_stretches
from tests.sensitivity_oracle import trials_by_definition, vt_by_definition

YEAR = 365.25 * 86400
FOUND_SECONDS = 1.0  # search.found_seconds' default
TRAINING = (500.0, 600.0)
VOLUME_GPC3, DRAWN, INJECTED = 3.0, 15, 10
TOLERANCE = 1e-9
"""Relative: the same doubles by another route; only the rounding of the cube root and of
the Beta quantile's root finding differ."""

# injections: nine held out, near triggers of every loudness (the one at 450 s 1.5 s from its
# trigger: missed), one far from any trigger; two in the training span, one near the loudest
# trigger (12: one background trigger louder, IFAR L / 2), which must not count as found
INJECTIONS = [150.0, 230.0, 310.0, 380.0, 450.0, 530.0, 570.0, 650.0, 720.0, 800.0, 880.0]
TRIGGERS = [(150.3, 9.5), (230.0, 4.2), (309.6, 2.0), (380.9, 6.1), (451.5, 8.0),
            (530.2, 12.0), (650.1, 0.7), (720.4, 5.0), (800.0, 3.3), (960.0, 1.1)]


def merged(tmp_path: Path) -> tuple[dict, Path, Path]:
    """``(campaign.json's bbhnet, campaign file, injection list)`` of the constructed case."""
    listed = tmp_path / "synth.json"
    listed.write_text(json.dumps({
        "injections": [{"gps_time": t, "network_snr": 10.0} for t in INJECTIONS],
        "population": {"time_volume_gpc3": VOLUME_GPC3, "drawn": DRAWN, "injected": INJECTED}}))
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 1000,
                    "sample_rate": 16},
           "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
           "search": {"injections": str(listed), "slides": 3, "slide_seconds": 1.0}}
    config = config_from_dict(raw, tmp_path / "c.toml")
    triggers = np.zeros(len(TRIGGERS), TRIGGER_COLUMNS)
    triggers["time"], triggers["statistic"] = zip(*TRIGGERS, strict=True)
    rng = np.random.default_rng(5)
    background = np.zeros(60, BACKGROUND_COLUMNS)
    background["shift"] = np.repeat([1.0, 2.0, 3.0], 20)
    background["time"] = rng.uniform(20.0, 480.0, 60)
    background["statistic"] = rng.exponential(2.5, 60)
    path = tmp_path / "campaign.h5"
    with h5py.File(path, "w") as file:
        request = SummaryRequest(file, config, make_stretches(config.geometry, [(0.0, 1000.0)]),
                                 {"bbhnet": list(TRAINING)},
                                 [ShardProducts(arrays={"triggers": triggers,
                                                        "background": background})], None)
        summary = search_summary(request)
    (tmp_path / "campaign.json").write_text(json.dumps(summary))
    return json.loads((tmp_path / "campaign.json").read_text())["bbhnet"], path, listed


def livetime_by_definition(lags: list[float], exclusion_seconds: float = 4.0) -> float:
    """The slides' livetime ``L``: over each slide's lag, the seconds of the statistic's rows
    (windows of 1 s ending at 1, 1.25, ..., 1000 s, each its 0.25 s stride: ``(0.75, 1000]``)
    where the slide is formed (``t - lag`` a row too) and neither ``t`` nor ``t - lag`` lies
    within ``exclusion_seconds`` (search.exclusion_seconds' default) of an injection or in
    the training span. Counted on a 1/16 s grid, exact here: every edge lies on it."""
    cell = 1 / 16
    t = np.arange(0.75, 1000.0, cell) + cell / 2  # the cells' middles
    cuts = [(i - exclusion_seconds, i + exclusion_seconds) for i in INJECTIONS] + [TRAINING]

    def cut(x: np.ndarray) -> np.ndarray:
        return np.any([(a <= x) & (x < b) for a, b in cuts], axis=0)
    return sum(float(np.sum((t - lag > 0.75) & ~cut(t) & ~cut(t - lag))) * cell
               for lag in lags)


def agrees(value, expected, rel: float = TOLERANCE) -> bool:
    """``|value - expected| <= rel |expected|``; NaN or None never agrees."""
    if value is None or expected is None:
        return False
    return bool(abs(value - expected) <= rel * abs(expected))


def jeffreys(found: int, trials: float, confidence: float = 0.6827) -> tuple[float, float]:
    low, high = stats.beta(found + 0.5, trials - found + 0.5).interval(confidence)
    return (0.0 if found == 0 else float(low)), (1.0 if found >= trials else float(high))


def distance_mpc(vt: float, years: float) -> float:
    return 1000.0 * (3.0 * vt / (4.0 * math.pi * years)) ** (1.0 / 3.0)


def problems(bbhnet: dict, path: Path, listed: Path, *, confidence: float = 0.6827,
             t_seconds: float | None = None, shift_injections: float = 0.0) -> list[str]:
    """What of ``bbhnet`` (campaign.json) disagrees with the definitions (module docstring)
    recomputed from the file; the keyword arguments perturb the oracle (controls)."""
    with h5py.File(path, "r") as f:
        times = np.asarray(f["triggers"]["time"], np.float64)
        statistic = np.asarray(f["triggers"]["statistic"], np.float64)
        background = np.asarray(f["background"]["statistic"], np.float64)
    livetime, out = bbhnet["background_livetime_seconds"], []
    defined = livetime_by_definition([1.0, 2.0, 3.0])
    if not agrees(livetime, defined):
        out.append(f"livetime {livetime}, here {defined}")
    louder = (background[None, :] >= statistic[:, None]).sum(axis=1)
    ifars = livetime / (1 + louder) / YEAR
    if not agrees(bbhnet["loudest_ifar_years"], float(ifars.max())):
        out.append(f"loudest IFAR {bbhnet['loudest_ifar_years']}, here {ifars.max()}")
    listing = json.loads(listed.read_text())
    held_out = [i["gps_time"] + shift_injections for i in listing["injections"]
                if not TRAINING[0] <= i["gps_time"] < TRAINING[1]]
    population = listing["population"]
    trials = trials_by_definition(population, len(held_out))
    t_years = (bbhnet["held_out_seconds"] if t_seconds is None else t_seconds) / YEAR
    vt_full = population["time_volume_gpc3"] * t_years
    reach = livetime / YEAR
    measured = [p for p in bbhnet["sensitivity"]["curve"] if p["ifar_threshold_years"] <= reach]
    for point in bbhnet["sensitivity"]["curve"]:  # beyond the reach: nothing is measurable
        if point["ifar_threshold_years"] > reach and (point["measurable"]
                                                      or point["vt_gpc3_years"] is not None):
            out.append(f"IFAR {point['ifar_threshold_years']:.3g} yr, beyond the reach "
                       f"{reach:.3g} yr: measured")
    for point in measured:
        threshold = point["ifar_threshold_years"]
        found = sum(bool(np.any((np.abs(times - t) <= FOUND_SECONDS) & (ifars >= threshold)))
                    for t in held_out)
        low, high = jeffreys(found, trials, confidence)
        vt = vt_by_definition(population, len(held_out), t_years, found)
        expected = {"vt_gpc3_years": vt, "vt_low": vt_full * low, "vt_high": vt_full * high,
                    "distance": distance_mpc(vt, t_years),
                    "distance_low": distance_mpc(vt_full * low, t_years),
                    "distance_high": distance_mpc(vt_full * high, t_years)}
        quoted = {"vt_gpc3_years": point["vt_gpc3_years"],
                  "vt_low": point["vt_interval_gpc3_years"][0],
                  "vt_high": point["vt_interval_gpc3_years"][1],
                  "distance": point["sensitive_distance_mpc"],
                  "distance_low": point["sensitive_distance_interval_mpc"][0],
                  "distance_high": point["sensitive_distance_interval_mpc"][1]}
        if point["found"] != found:
            out.append(f"IFAR {threshold:.3g} yr: {point['found']} found, here {found}")
        for key, value in expected.items():
            exact_zero = value == 0.0 and quoted[key] == 0.0
            if not exact_zero and not agrees(quoted[key], value):
                out.append(f"IFAR {threshold:.3g} yr: {key} {quoted[key]}, here {value}")
    return out


def test_loudest_ifar_vt_interval_and_distance_follow_from_the_campaign_files(tmp_path) -> None:
    bbhnet, path, listed = merged(tmp_path)
    curve = bbhnet["sensitivity"]["curve"]
    found = [p["found"] for p in curve if p["measurable"]]
    # the case has thresholds with none found (the interval's lower end 0 by the rule) and
    # several with some found (Beta quantiles at both ends), of 9 x 15 / 10 = 13.5 trials
    assert 0 in found and len({f for f in found if f > 0}) >= 3
    assert bbhnet["sensitivity"]["trials"] == 13.5 and bbhnet["held_out_seconds"] == 899.25
    assert problems(bbhnet, path, listed) == []


def test_the_search_numbers_check_fails_on_a_wrong_interval_time_livetime_or_nan(tmp_path
                                                                                ) -> None:
    bbhnet, path, listed = merged(tmp_path)
    assert problems(bbhnet, path, listed, confidence=0.90) != []  # another interval
    # T with the training span in it (the defect VT's T guards against)
    assert problems(bbhnet, path, listed, t_seconds=bbhnet["analysed_seconds"]) != []
    assert problems(bbhnet, path, listed, shift_injections=5.0) != []  # injections elsewhere
    halved = {**bbhnet, "background_livetime_seconds": bbhnet["background_livetime_seconds"] / 2}
    assert any("loudest IFAR" in p for p in problems(halved, path, listed))
    assert any(p.startswith("livetime") for p in problems(halved, path, listed))
    # the livetime's own control: the exclusion a sample (1/16 s) wider misses it
    assert not agrees(bbhnet["background_livetime_seconds"],
                      livetime_by_definition([1.0, 2.0, 3.0], exclusion_seconds=4.0625))
    point = bbhnet["sensitivity"]["curve"][0]
    nan = {**bbhnet, "sensitivity": {**bbhnet["sensitivity"], "curve": [
        {**point, "sensitive_distance_mpc": float("nan")}]}}
    assert problems(nan, path, listed) != []
