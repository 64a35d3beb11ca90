"""BBHnet's time slides (issue #17) without a server: the stateful step pairs each window of
the first detector with the second's earlier ones for any split of the stream, the slides'
arithmetic (livetime, false-alarm rate), and the refusals of make-dag and export.
The campaigns with a server are tests/test_time_slides.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, ModelError, exit_code
from offline_iaas.physics import SECONDS_PER_YEAR, false_alarm_rates, slide_livetime
from offline_iaas.repository.backend.stateful import SnapshotState, TimeSlides, slide_arguments
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.pipeline import stages
from offline_iaas.repository.served import check_repository
from offline_iaas.stretches import client_shares, first_formed_window, slides_formed
from tests.error_catalogue import documented, documented_refusals
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, untrained_weights

# ---- the step and the arithmetic, without a server ------------------------------------------


def windows_by_hand(stream: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """Window j of a stream: samples ``[(j + 1) S - K, (j + 1) S)``, zeros before the start."""
    padded = np.concatenate([np.zeros((len(stream), kernel)), stream], axis=1)
    return np.stack([padded[:, (j + 1) * stride : (j + 1) * stride + kernel]
                     for j in range(stream.shape[1] // stride)])


def slid_by_hand(windows: np.ndarray, lag_windows: int, shifts: int, warmup: int,
                 weights: np.ndarray) -> np.ndarray:
    """A linear "network" (``weights`` [2, K]) on the first detector's window j with the
    second's window ``j - k * lag_windows``; NaN where that is one of the stream's first
    ``warmup`` windows (not formed)."""
    out = []
    for j in range(len(windows)):
        for k in range(1, shifts + 1):
            earlier = j - k * lag_windows
            if earlier < warmup:
                out.append(np.nan)
                continue
            pair = np.stack([windows[j, 0], windows[earlier, 1]])
            out.append(float((pair * weights).sum()))
    return np.array(out)


@pytest.mark.parametrize("sizes", [[40], [1, 39], [7, 3, 13, 17], [1] * 40])
def test_time_slides_pair_each_window_with_the_earlier_ones(sizes: list[int],
                                                            monkeypatch) -> None:
    kernel, stride, lag_windows, shifts, warmup = 32, 8, 2, 5, 3
    monkeypatch.setattr(TimeSlides, "BATCH_WINDOWS", 7)  # batches that cut through windows
    rng = np.random.default_rng(1)
    stream = rng.normal(size=(2, 40 * stride))
    windows = windows_by_hand(stream, kernel, stride).astype(np.float32)
    weights = rng.normal(size=(2, kernel))

    def network(pairs: np.ndarray) -> np.ndarray:
        return (pairs * weights).sum(axis=(1, 2))

    slides = TimeSlides(lag_windows, shifts, warmup)
    position, got = 0, []
    for n in sizes:
        got.append(slides.update(windows[position : position + n], network))
        position += n
    got = np.concatenate(got)
    expected = slid_by_hand(windows, lag_windows, shifts, warmup, weights)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)  # NaN where NaN
    formed = ~np.isnan(got.reshape(-1, shifts))
    # slide k is formed from window warm-up + k * lag on, and on every later window
    assert [int(np.argmax(formed[:, k - 1])) for k in range(1, shifts + 1)] == [
        warmup + k * lag_windows for k in range(1, shifts + 1)]
    assert all(formed[np.argmax(formed[:, c]) :, c].all() for c in range(shifts))
    # negative controls: one window more of lag is another background; a slide formed one
    # window early (its second window in the warm-up) another pattern
    other = slid_by_hand(windows, lag_windows + 1, shifts, warmup, weights)
    assert not np.allclose(got, other, rtol=1e-5, atol=1e-4, equal_nan=True)
    early = slid_by_hand(windows, lag_windows, shifts, warmup - 1, weights)
    assert not np.array_equal(np.isnan(got), np.isnan(early))


def slides_by_definition(stream: np.ndarray, kernel: int, stride: int, warmup: int,
                         step: int, shifts: int, weights: np.ndarray) -> np.ndarray:
    """``[kept windows, shifts]`` of one stretch from the definition: slide k of window j (j
    from ``warmup``) pairs the first detector's samples ``[(j + 1) S - K, (j + 1) S)`` with
    the second's ``k * step`` strides earlier, where those start at or after the stretch's
    first kept window; NaN elsewhere."""
    windows = stream.shape[1] // stride
    out = np.full((windows - warmup, shifts), np.nan)
    for j in range(warmup, windows):
        for k in range(1, shifts + 1):
            earlier = j - k * step
            if earlier >= warmup:
                first = stream[0, (j + 1) * stride - kernel : (j + 1) * stride]
                second = stream[1, (earlier + 1) * stride - kernel : (earlier + 1) * stride]
                out[j - warmup, k - 1] = (first * weights[0]).sum() + (second * weights[1]).sum()
    return out


@pytest.mark.parametrize("clients", [1, 2, 3, 5, 8, 16])
def test_any_split_forms_the_slides_of_the_whole_stretch(tmp_path: Path, clients: int) -> None:
    """The planner's pieces, each streamed through the snapshot and the slide step as the
    server does, give the slides of the definition: a piece streams the longest slide's
    history before its first kept window, clipped at the stretch's start."""
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN.replace("duration = 64",
                                                                   "duration = 16"))
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', "search.slides=3", f"layout.clients_per_server={clients}"])
    kernel, stride, shifts = config.kernel_samples, config.stride_samples, 3
    warmup, step = config.stretch_warmup_windows, config.slide_windows
    assert (warmup, step, config.warmup_windows) == (3, 4, 3 + 12)
    rng = np.random.default_rng(clients)
    stream = rng.normal(size=(2, 64 * stride))
    weights = rng.normal(size=(2, kernel))

    def network(pairs: np.ndarray) -> np.ndarray:
        return (pairs * weights).sum(axis=(1, 2))

    def streamed(first: int, stop: int, skip_from: int = 0) -> np.ndarray:
        """Windows ``[first, stop)`` of the stretch as one stream; the slides from row
        ``skip_from`` on."""
        windows = SnapshotState(2, kernel, stride).update(
            stream[:, first * stride : stop * stride].astype(np.float32))
        slides = TimeSlides(step, shifts, warmup).update(windows, network)
        return slides.reshape(-1, shifts)[skip_from:]

    expected = slides_by_definition(stream, kernel, stride, warmup, step, shifts, weights)
    pieces = [p for share in client_shares(config) for p in share.pieces]
    assert [p.first_window for p in pieces] == [
        max(0, p.output_start - warmup - shifts * step) for p in pieces]
    assert pieces[0].output_start == warmup and pieces[-1].output_stop == 64
    split = np.concatenate([streamed(p.first_window, p.output_stop,
                                     p.output_start - p.first_window) for p in pieces])
    np.testing.assert_allclose(split, expected, rtol=1e-4, atol=1e-3)  # NaN where NaN
    if clients > 1:  # control: pieces that stream only the warm-up lose slides
        short = np.concatenate([streamed(p.output_start - warmup, p.output_stop, warmup)
                                for p in pieces])
        assert not np.array_equal(np.isnan(short), np.isnan(expected))


def test_a_trigger_louder_than_the_whole_background_gets_one_over_the_livetime() -> None:
    """FAR = (n + 1) / L with n the background triggers at least as loud (PyCBC's)."""
    far, ifar = false_alarm_rates(np.array([5.0, 3.0, 2.0, 0.5]), np.array([1.0, 2.0, 3.0]),
                                  100.0)
    # at least as loud: none, 3.0 (a tie counts), 2.0 and 3.0, all three
    np.testing.assert_allclose(far, [1 / 100, 2 / 100, 3 / 100, 4 / 100])
    np.testing.assert_allclose(ifar, 1 / far / SECONDS_PER_YEAR)
    # none louder and one louder are told apart: the first alone reaches IFAR = L
    assert ifar[0] == pytest.approx(100.0 / SECONDS_PER_YEAR) and ifar[1] == ifar[0] / 2


def test_a_slide_s_livetime_counts_only_the_windows_it_formed() -> None:
    # a stretch whose windows end in (100, 110] s: a slide of 1 s is formed on (101, 110]
    assert slide_livetime((100.0, 110.0), [], 1.0) == 9.0
    assert slide_livetime((100.0, 110.0), [], 10.0) == slide_livetime((100.0, 110.0), [],
                                                                      12.0) == 0.0
    # a cut [103, 104) in either detector's time: t in it, or t - 1 s in it
    assert slide_livetime((100.0, 110.0), [(103.0, 104.0)], 1.0) == 7.0
    # without a slide formed there is no background: no rate is measured
    far, ifar = false_alarm_rates(np.array([1.0, 2.0]), np.zeros(0), 0.0)
    assert np.isinf(far).all() and (ifar == 0).all()


def test_time_shifts_need_a_bbhnet_mode_two_detectors_and_whole_samples(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    refusals = {}
    with pytest.raises(ConfigError, match="search.slides.*BBHnet "
                       "mode") as refusals["time-slides-outside-bbhnet"]:
        load_config(tmp_path / "campaign.toml", ["search.slides=3"])  # classifier
    bbhnet = ['model.mode="bbhnet"', "search.slides=3"]
    with pytest.raises(ConfigError, match="search.slide_seconds.*whole number of "
                       "strides") as refusals["time-slides-not-whole-strides"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, "search.slide_seconds=0.3"])
    with pytest.raises(ConfigError, match="data.channels must name "
                       "two") as refusals["time-slides-one-detector"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, 'data.channels=["H1:X"]'])
    documented_refusals(refusals, {tmp_path / "campaign.toml": "C"})
    with pytest.raises(ConfigError, match="search.slides.*negative"):
        load_config(tmp_path / "campaign.toml", ['model.mode="bbhnet"', "search.slides=-1"])


def test_slides_add_history_to_pieces_not_warm_up_to_stretches(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)  # K = 256, S = 64 samples
    for mode, plain in (("bbhnet", 3), ("e2e", 9)):
        base = [f'model.mode="{mode}"', f"data.witnesses={WITNESSES}"]
        unslid = load_config(tmp_path / "campaign.toml", base)
        assert unslid.warmup_windows == unslid.stretch_warmup_windows == plain
        # 5 slides of 1 s (the shortest: model.kernel_seconds): 1280 samples, 20 strides
        slid = load_config(tmp_path / "campaign.toml",
                           [*base, "search.slides=5", "search.slide_seconds=1"])
        assert slid.stretch_warmup_windows == plain  # the zero lag starts where it did
        assert slid.warmup_windows == plain + 20  # a piece inside a stretch streams more
        formed = slides_formed(slid.geometry, 0, 22)
        assert [int(np.argmax(formed[:, k])) for k in range(5)] == [4, 8, 12, 16, 20]
        assert formed[20:].all() and not formed[:4].any()
        assert (first_formed_window(slid.geometry, 3) == 12
                and slides_formed(slid.geometry, 12, 1)[0].tolist() == [True] * 3 + [False] * 2)


def test_a_time_slide_stage_spec_of_an_older_export_gives_the_same_slides(tmp_path: Path
                                                                         ) -> None:
    """The stage spec names the slides as the glossary does; one exported before, with
    ``shift_windows`` and ``shifts``, still gives the server the same ``TimeSlides``."""
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', "search.slides=5", "search.slide_seconds=1"])
    spec = next(s for s in stages(config) if s.model == "timeslides").to_dict()["params"]
    lag = config.slide_windows
    assert lag > 1 and (spec["slide_windows"], spec["slides"]) == (lag, 5)
    older = {"shift_windows": lag, "shifts": 5, "warmup_windows": spec["warmup_windows"]}
    wanted = {"slide_windows": lag, "slides": 5, "warmup_windows": config.stretch_warmup_windows}
    assert slide_arguments(spec) == slide_arguments(older) == wanted
    assert TimeSlides(**slide_arguments(older)).history == 5 * lag
    assert slide_arguments({**older, "shifts": 4}) != wanted  # control: the old key is read


def test_the_ensemble_layout_refuses_time_slides(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', "search.slides=2",
        f'model.repository="{tmp_path / "repo"}"'])
    with pytest.raises(ModelError, match="steps of the fused model") as caught:
        export_repository(config, None, ensemble=True)
    documented("ensemble-with-time-slides", str(caught.value), {tmp_path / "repo": "R"},
               exit_code=exit_code(ModelError))
    assert not (tmp_path / "repo").exists()


def test_a_repository_whose_slides_reach_into_the_warm_up_is_refused(tmp_path: Path) -> None:
    """A repository exported before slides were formed only inside the stretch (its manifest
    records two numbers) would put values where the merge expects NaN: refused up front."""
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', "search.slides=2",
        f'model.repository="{tmp_path / "repo"}"'])
    export_repository(config, untrained_weights(tmp_path / "weights"))
    check_repository(config)
    manifest = tmp_path / "repo" / "manifest.json"
    record = json.loads(manifest.read_text())
    assert record["time_slides"] == [2, 256, 3]
    manifest.write_text(json.dumps({**record, "time_slides": [2, 256]}))
    with pytest.raises(ModelError, match=r"formed from window \[\], the campaign's from "
                       "window 3") as caught:
        check_repository(config)
    documented("repository-slides-from-another-window", str(caught.value),
               {tmp_path / "repo": "R"}, exit_code=exit_code(ModelError))
