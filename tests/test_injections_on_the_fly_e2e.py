"""Injections on the fly in ``e2e`` (issue #41, ``search.inject``): the set's signals go into the
strain before DeepClean's subtraction, the witnesses untouched, and the foreground is streamed
through the same chain (DeepClean, subtraction, BBHnet) from the history its online average and
time slides need.

Proven equal to injections in the data, as ``tests/test_injections_on_the_fly.py`` proves it
for ``bbhnet``: one set of (untrained, scaled) weights runs on frames with the set baked in by
``synth`` and on the same clean frames with the set injected on the fly; the foreground's
statistic on the cleaned strain equals the baked-in run's at every window it covers
(``TOLERANCE``), in the reference and in campaigns of two splits, and the set moved by one frame
sample fails (the negative control: measured 6.9e-6, 69x the tolerance). The campaign also
searches the raw strain (``statistic_raw``, ``background_raw``; ``bbhnet.without_cleaning``),
served and streamed like the cleaned search and equal to campaign = reference; checked against
an independent path, mode bbhnet in process on the same frames, slides and set (the same
foreground statistic, found/missed and counts; the cleaned statistic differs from it: the
negative control). Measured on a 2-core AMD EPYC shared with other jobs: the whole module in
100 s (the two campaigns, ``slow``, included).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.frames import read_span
from offline_iaas.data.synth import INJECTION_SET
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.merge import reference as reference_module
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.postprocess import physics_lines
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from offline_iaas.rundir import RunDir
from offline_iaas.science.bbhnet.injections import injection_lines
from offline_iaas.search import onthefly
from offline_iaas.summary_physics import physics_type, section
from tests.error_catalogue import documented
from tests.helpers import SPLITS, WITNESSES, run_split, untrained_weights
from tests.oracle import analysed_spans
from tests.sensitivity_oracle import vt_by_definition
from tests.test_injections_on_the_fly import (
    FRAME_RATE,
    TOLERANCE,
    foreground_of,
    mismatch,
    write_baked_and_clean,
)

SLIDES = 4
"""Time slides: a background, so the merge measures FAR and VT on the foreground."""


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same seed's frames (strain and witnesses) with 2 injections baked in and without
    any, one e2e repository, and the references of both (the clean one injected on the fly)."""
    root = tmp_path_factory.mktemp("onthefly-e2e")
    write_baked_and_clean(root)
    base = ['model.mode="e2e"', f"data.witnesses={WITNESSES}", f"search.slides={SLIDES}",
            f'model.repository="{root / "repository"}"',
            f'search.injections="{root / "baked" / INJECTION_SET}"']
    baked = load_config(root / "baked.toml", [*base, f'data.frames="{root / "baked"}"'])
    clean = [*base, f'data.frames="{root / "clean"}"', "search.inject=true"]
    fly = load_config(root / "clean.toml", clean)
    export_repository(fly, untrained_weights(root / "weights"))  # serves the raw search too
    return {"root": root, "baked": baked, "fly": fly, "overrides": clean,
            "baked_out": run_reference(baked, root / "baked.h5")[0],
            "fly_out": run_reference(fly, root / "fly.h5")[0]}


def test_e2e_injects_into_the_strain_only_and_leaves_the_witnesses_untouched(e2e) -> None:
    config = e2e["fly"]
    start, end = config.data.start, config.data.start + config.data.duration
    channels = list(config.stream_channels)
    strain = len(config.data.channels)
    assert channels[strain:] == list(config.data.witnesses) and strain < len(channels)
    frames = discover_frames(config.data)
    clean = read_span(frames, channels, start, end, FRAME_RATE)
    added = read_span(frames, channels, start, end, FRAME_RATE, None,
                      onthefly.on_the_fly(config))
    assert np.array_equal(added[strain:], clean[strain:])
    assert (np.abs(added[:strain] - clean[:strain]).max(axis=1) > 0).all()


def test_e2e_reference_foreground_equals_the_baked_in_cleaned_statistic_and_one_sample_late_fails(
        e2e, monkeypatch) -> None:
    foreground = foreground_of(e2e["fly_out"])
    assert len(foreground) > 0
    assert mismatch(foreground, e2e["baked_out"]) <= TOLERANCE
    # the statistic on the cleaned strain moves with the injections: the comparison can fail
    late = onthefly.on_the_fly

    def one_sample_late(config, shift_seconds: float = 0.0):
        return late(config, shift_seconds + 1.0 / FRAME_RATE)

    monkeypatch.setattr(reference_module, "on_the_fly", one_sample_late)
    shifted, _ = run_reference(e2e["fly"], e2e["root"] / "late.h5")
    assert mismatch(foreground_of(shifted), e2e["baked_out"]) > 10 * TOLERANCE


def foreground_problems(output: Path, config, livetime_scale: float = 1.0,
                        raw: bool = False) -> list[str]:
    """The injections' statistic, IFAR and found flag and the VT curve recomputed from the
    output file, its injection set and the slides' livetime by their definitions, sharing no
    code with the merge: a foreground value's IFAR is ``L / (n + 1)`` with ``n`` the
    background values at least as loud; an injection's the largest within ``found_seconds``,
    found at IFAR >= the threshold; VT = V T found / trials, T the analysed time (these
    untrained weights have no training span). ``L`` is the summary's (recomputed from its
    definition for e2e in tests/test_time_slides.py), times ``livetime_scale`` (a control).
    ``raw``: the search of the raw strain (``statistic_raw``, ``background_raw``,
    ``bbhnet.without_cleaning``), over the same slides and so the same livetime."""
    summary = json.loads(output.with_suffix(".json").read_text())["bbhnet"]
    summary, suffix = (summary["without_cleaning"], "_raw") if raw else (summary, "")
    with h5py.File(output, "r") as f:
        foreground, spans = f["foreground"][()], analysed_spans(f)
        background = np.asarray(f[f"background{suffix}"]["statistic"], np.float64)
    statistic = foreground[f"statistic{suffix}"]
    with h5py.File(config.search.injections, "r") as f:
        attrs = dict(f.attrs)
    livetime = summary["background_livetime_seconds"] * livetime_scale
    louder = (background[None, :] >= statistic[:, None]).sum(axis=1)
    ifar = livetime / (louder + 1) / (365.25 * 86400)
    problems, best = [], []
    for row in summary["injections"]:
        near = np.abs(foreground["time"] - row["gps_time"]) <= config.search.found_seconds
        best.append(float(ifar[near].max()) if near.any() else 0.0)
        found = best[-1] >= config.search.ifar_threshold_years
        if not (np.isclose(row["ifar_years"], best[-1], rtol=1e-9, atol=0)
                and row["found"] == found and row["statistic"] == pytest.approx(
                    float(statistic[near].max()))):
            problems.append(f"GPS {row['gps_time']}: campaign {row}, here IFAR {best[-1]}")
    years = sum(b - a for a, b in spans) / (365.25 * 86400)
    for point in summary["sensitivity"]["curve"]:
        if point["measurable"]:
            found = sum(v >= point["ifar_threshold_years"] for v in best)
            vt = vt_by_definition(attrs, len(best), years, found)
            if point["found"] != found or not np.isclose(point["vt_gpc3_years"], vt, rtol=1e-9):
                problems.append(f"IFAR {point['ifar_threshold_years']:.3g} yr: campaign "
                                f"{point['found']} VT {point['vt_gpc3_years']}, here {found} {vt}")
    return problems


def test_e2e_found_missed_and_vt_come_from_the_foreground_of_the_cleaned_strain(e2e) -> None:
    summary = json.loads(e2e["fly_out"].with_suffix(".json").read_text())["bbhnet"]
    assert summary["injection_counts"]["listed"] == 2 == len(summary["injections"])
    assert summary["time_shifts"] == SLIDES
    assert summary["sensitivity"]["injections"] == 2
    found = [p["found"] for p in summary["sensitivity"]["curve"] if p["measurable"]]
    assert max(found) > 0 and min(found) < 2  # the curve has found and missed to count
    assert foreground_problems(e2e["fly_out"], e2e["fly"]) == []
    # control: the background's livetime doubled (every foreground IFAR with it)
    assert foreground_problems(e2e["fly_out"], e2e["fly"], livetime_scale=2.0) != []


@pytest.fixture(scope="module")
def without_cleaning(e2e) -> dict:
    """The independent search without cleaning: mode bbhnet (the same BBHnet weights, slides
    and set on the fly in the same clean frames) in-process, and its numbers."""
    root = e2e["root"]
    raw = load_config(root / "clean.toml", [*e2e["overrides"], 'model.mode="bbhnet"',
                                            f'model.repository="{root / "repository-raw"}"'])
    export_repository(raw, root / "weights")
    out, _ = run_reference(raw, root / "raw.h5")
    return {"out": out, "bbhnet": json.loads(out.with_suffix(".json").read_text())["bbhnet"]}


def test_e2e_searches_the_raw_strain_as_mode_bbhnet_does_on_the_same_injections(
        e2e, without_cleaning) -> None:
    """e2e's search on the raw strain (``statistic_raw``, ``background_raw``) finds and misses
    the injections as mode bbhnet does on the same frames, set and slides, at the same
    stamped times; its record is ``bbhnet.without_cleaning``, through the same found/missed
    and VT code as the cleaned strain's."""
    cleaned = json.loads(e2e["fly_out"].with_suffix(".json").read_text())["bbhnet"]
    raw, bbhnet = cleaned["without_cleaning"], without_cleaning["bbhnet"]
    foreground, independent = foreground_of(e2e["fly_out"]), foreground_of(without_cleaning["out"])
    assert np.array_equal(foreground["time"], independent["time"])
    scale = np.abs(independent["statistic"]).max()
    assert np.abs(foreground["statistic_raw"] - independent["statistic"]).max() <= (
        TOLERANCE * scale)
    # negative control: the cleaned strain's statistic is not the raw strain's
    assert np.abs(foreground["statistic"] - independent["statistic"]).max() > 10 * (
        TOLERANCE * scale)
    assert [r["gps_time"] for r in raw["injections"]] == [
        r["gps_time"] for r in bbhnet["injections"]]
    assert [r["found"] for r in raw["injections"]] == [r["found"] for r in bbhnet["injections"]]
    assert [r["statistic"] for r in raw["injections"]] == pytest.approx(
        [r["statistic"] for r in bbhnet["injections"]], rel=1e-6)
    assert raw["sensitivity"]["counts"] == bbhnet["sensitivity"]["counts"]
    assert raw["time_shifts"] == bbhnet["time_shifts"] == SLIDES
    # the same slides of the same data; e2e's stretches warm up longer (DeepClean's average)
    assert 0 < raw["background_livetime_seconds"] == cleaned["background_livetime_seconds"] < (
        bbhnet["background_livetime_seconds"])
    with h5py.File(e2e["fly_out"], "r") as f:
        assert {"triggers_raw", "background_raw"} <= set(f)
        assert len(f["background_raw"]) == raw["background_triggers"] > 0
    # its IFARs, found flags and VT curve from their definitions, as the cleaned search's
    # (control: the livetime doubled)
    assert foreground_problems(e2e["fly_out"], e2e["fly"], raw=True) == []
    assert foreground_problems(e2e["fly_out"], e2e["fly"], livetime_scale=2.0, raw=True) != []


@pytest.mark.slow
@pytest.mark.parametrize(("clients", "shard_seconds"), SPLITS)
def test_an_e2e_campaign_s_foreground_equals_the_reference_and_the_baked_in_run(
        e2e, clients: int, shard_seconds: int) -> None:
    root = e2e["root"]
    _, run_dir = run_split(root / "clean.toml", e2e["overrides"], clients, shard_seconds)
    output = run_dir / "output" / "campaign.h5"
    comparison = compare_outputs(output, e2e["fly_out"])
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    compared = set(comparison.relative) | set(comparison.time_seconds)
    assert {"foreground/statistic", "foreground/time", "foreground/statistic_raw",
            "triggers_raw/statistic", "background_raw/statistic"} <= compared
    assert mismatch(foreground_of(output), e2e["baked_out"]) <= TOLERANCE
    with h5py.File(run_dir / "parts" / "client0.h5", "r") as f:
        assert "foreground" in f
    campaign = json.loads((run_dir / "output" / "campaign.json").read_text())
    reference = json.loads(e2e["fly_out"].with_suffix(".json").read_text())
    found = campaign["bbhnet"]
    assert [r["found"] for r in found["injections"]] == [
        r["found"] for r in reference["bbhnet"]["injections"]]
    assert found["sensitivity"]["at_reach"] == reference["bbhnet"]["sensitivity"]["at_reach"]
    raw, raw_reference = found["without_cleaning"], reference["bbhnet"]["without_cleaning"]
    assert [r["found"] for r in raw["injections"]] == [
        r["found"] for r in raw_reference["injections"]]
    assert raw["sensitivity"]["at_reach"] == raw_reference["sensitivity"]["at_reach"]
    report = RunDir(run_dir).report.read_text()
    assert "Sensitivity" in report and "<h3>Cleaning&#x27;s gain</h3>" in report
    assert "VT cleaned [Gpc^3 yr]" in report and "VT raw [Gpc^3 yr]" in report


def test_a_repository_without_the_raw_search_is_refused_for_an_e2e_campaign_that_injects(
        e2e) -> None:
    """An e2e repository exported without ``search.inject`` serves no ``statistic_raw``:
    refused (one line) before a client asks for it; the one exported with it still serves a
    campaign without injections on the fly (the raw search's outputs are left unrequested)."""
    root = e2e["root"]
    plain = load_config(root / "clean.toml", [
        *(o for o in e2e["overrides"] if o != "search.inject=true"),
        f'model.repository="{root / "repository-plain"}"'])
    export_repository(plain, root / "weights")
    injecting = load_config(root / "clean.toml", [
        *e2e["overrides"], f'model.repository="{root / "repository-plain"}"'])
    with pytest.raises(ModelError, match="statistic_raw, background_raw") as caught:
        check_repository(injecting)
    assert str(caught.value).count("\n") == 0
    documented("repository-without-raw-search", str(caught.value),
               {root / "repository-plain": "R"}, exit_code=exit_code(ModelError))
    check_repository(e2e["baked"])  # no inject: served by the repository with the raw search
    check_repository(e2e["fly"])


def test_the_summary_lines_give_the_search_with_and_without_cleaning(e2e) -> None:
    """What the merge and the demo print: the cleaned strain's found/missed and VT, then the
    raw strain's (``bbhnet.without_cleaning``), each once."""
    physics = section(physics_type("e2e"),
                      json.loads(e2e["fly_out"].with_suffix(".json").read_text()))
    lines = physics_lines(physics)
    raw = [line for line in lines if line.startswith("BBHnet without cleaning:")]
    cleaned = [line for line in lines if line.startswith("BBHnet:")]
    assert any("found" in line for line in raw) and any("IFAR" in line for line in raw)
    assert len(raw) == len(injection_lines(physics.bbhnet.without_cleaning))
    assert len(cleaned) > len(raw)  # the triggers' and background's lines are the cleaned's
    plain = physics.model_copy(update={  # negative control
        "bbhnet": physics.bbhnet.model_copy(update={"without_cleaning": None})})
    assert not [line for line in physics_lines(plain) if "without cleaning" in line]
