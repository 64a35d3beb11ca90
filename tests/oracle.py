"""An independent oracle for a campaign's output (test-only code).

It imports nothing from ``offline_iaas``: it reads the run directory's resolved config with
``tomllib``, the frames with gwpy, cuts windows with numpy from GPS times, runs the
repository's ONNX graphs with onnxruntime, averages DeepClean's window predictions from the
definition (the mean of every window prediction that covers a sample), band-passes with scipy
and clusters triggers from their definition. What it predicts for every stretch — ``x0``,
``dx``, the number of samples and every value — comes from the closed-form expressions below,
not from the project's planner, stream step or writer.

With ``fs`` the model rate, ``K`` the kernel and ``S`` the stride (samples), ``m = K / S``, a
stretch starting at GPS ``a`` with ``L`` samples has ``W = floor(L / S)`` windows; window ``j``
covers samples ``[(j + 1) S - K, (j + 1) S)`` and the trailing ``L - W S`` samples are never
analysed.

=============  ===========================================  ==================================
mode           output, first value at                        number of values
=============  ===========================================  ==================================
classifier,    statistic of window ``j >= ceil(K/S) - 1``,   ``W - ceil(K/S) + 1``
bbhnet         ``a + ceil(K/S) S / fs`` (window end)
deepclean      noise/clean, ``a + (m - 1) S / fs``           ``(W - 2 (m - 1)) S`` samples
e2e            noise/clean, ``a + 2 (m - 1) S / fs``         ``(W - 3 (m - 1)) S`` samples
               statistic, ``a + (2 m - 1) S / fs``           ``W - 3 (m - 1)``
=============  ===========================================  ==================================

DeepClean's averaged stride ``q`` (samples ``[q S, (q + 1) S)``) is complete once every window
covering it holds data (``q >= m - 1``) and exists (``q <= W - m``). e2e subtracts the averaged
(unfiltered) prediction from the strain stride by stride and runs BBHnet on windows of that
cleaned stream that lie wholly after ``(m - 1) S``; its statistic rows are aligned with the noise
strides they were computed with, hence the later start of e2e's ``noise``/``clean``. The stored
``noise`` is the averaged prediction band-passed (Butterworth, zero phase) over each output span,
``clean`` the frames' strain minus it.

Time slides (``search.slides = N``, step ``D = slide_seconds * fs`` samples, a whole
number ``d = D / S`` of strides): the outputs start where they start without slides (the table
above), and ``slides`` holds, per kept window ``j`` and slide ``k = 1 .. N``, BBHnet on the
first detector's window ``j`` and the second detector's samples ``[(j + 1) S - K - k D,
(j + 1) S - k D)`` when those are a kept window too (window ``j - k d`` at or after the first
kept window: every sample real data of the stretch), and NaN where they are not: slide ``k``
of a stretch is formed from its ``k d``-th kept window on. Each slide's formed windows are
clustered like the zero lag into the ``background`` table, less the triggers whose first
detector's time ``t`` or second detector's time ``t - kD/fs`` lies within ``exclusion_seconds``
of an injection or in a training span (the manifest's: BBHnet's, in e2e DeepClean's too); a
trigger's FAR is the number of background triggers at least as loud (at least one) over the
slides' livetime (each formed window counts one stride, less the time where either detector's
time is cut), its IFAR the inverse in Julian years.
"""

from __future__ import annotations

import functools
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from tests.search_spans import search_training, union

TIME_TOLERANCE_SECONDS = 1e-6
FRAME_NAME = re.compile(r"^(?P<obs>[A-Z]+)-(?P<desc>[^-]+)-(?P<gps>\d+(?:\.\d+)?)-"
                        r"(?P<dur>\d+(?:\.\d+)?)\.gwf$")


@dataclass
class Expected:
    """One series the campaign must hold: ``group`` (``statistic``, ``noise/H1`` ...)."""

    group: str
    x0: float
    dx: float
    values: np.ndarray


@dataclass
class Triggers:
    """The clustered triggers the campaign must hold (with time slides: FAR, IFAR, background)."""

    time: np.ndarray
    statistic: np.ndarray
    far: np.ndarray | None = None
    ifar: np.ndarray | None = None
    background: dict[str, np.ndarray] | None = None
    livetime_seconds: float | None = None  # the slides' (campaign.json's background livetime)


# ---- the campaign as the run directory describes it ----------------------------------------


def read_run_config(run_dir: Path) -> dict:
    """The resolved config ``make-dag`` wrote (every key, defaults included)."""
    return tomllib.loads((run_dir / "campaign.toml").read_text())


def _intersect(x: list[tuple[float, float]], y: list[tuple[float, float]]):
    return [(max(a, c), min(b, d)) for a, b in x for c, d in y if max(a, c) < min(b, d)]


def frame_files(frames_dir: Path) -> list[Path]:
    return sorted(p for p in Path(frames_dir).rglob("*.gwf") if FRAME_NAME.match(p.name))


@functools.cache
def _channels_in(path: Path) -> frozenset[str]:  # gwpy's list (raw frames beside h(t) too)
    from gwpy.io.gwf import iter_channel_names
    return frozenset(iter_channel_names(str(path)))


def _holding(files: list[Path], channel: str) -> list[tuple[Path, float, float]]:
    """The files of ``channel``'s observatory that list it, with their names' GPS spans."""
    named = ((f, FRAME_NAME.match(f.name)) for f in files)
    return [(f, float(m["gps"]), float(m["gps"]) + float(m["dur"])) for f, m in named
            if channel[0] in m["obs"] and channel in _channels_in(f)]


def stretches(config: dict, warmup_windows: int) -> list[tuple[float, float]]:
    """Contiguous spans of data of every channel (from the frame file names), inside the
    config's span and science segments, ends rounded inward onto the stride grid; a stretch
    without one window after its warm-up is dropped."""
    data = config["data"]
    start, end = float(data["start"]), float(data["start"]) + float(data["duration"])
    files = frame_files(Path(data["frames"]))
    spans = [(start, end)]
    for channel in [*data["channels"], *data.get("witnesses", [])]:
        covered = [(t0, t1) for _, t0, t1 in _holding(files, channel)]
        spans = _intersect(spans, union(covered))
    if data.get("segments"):
        lines = (line.split("#", 1)[0].split() for line in
                 Path(data["segments"]).read_text().splitlines())
        science = [(float(fields[-2]), float(fields[-1])) for fields in lines if fields]
        spans = _intersect(spans, union(science))
    stride = 1.0 / float(config["model"]["inference_rate"])
    rounded = []
    for a, b in spans:
        a = start + math.ceil((a - start) / stride - 1e-9) * stride
        b = start + math.floor((b - start) / stride + 1e-9) * stride
        if round((b - a) / stride) > warmup_windows:
            rounded.append((a, b))
    return rounded


def read_stretch(config: dict, channels: list[str], a: float, b: float) -> np.ndarray:
    """``[channels, samples]`` of ``[a, b)`` read with gwpy, at the model rate."""
    from gwpy.timeseries import TimeSeries

    rate = float(config["data"]["sample_rate"])
    files = frame_files(Path(config["data"]["frames"]))
    rows = []
    for channel in channels:
        mine = [str(f) for f, t0, t1 in _holding(files, channel) if t0 < b and t1 > a]
        series = TimeSeries.read(mine, channel, start=a, end=b, format="gwf")
        if series.sample_rate.value != rate:
            raise ValueError(f"the oracle reads frames at the model rate only ({channel})")
        rows.append(np.asarray(series.value, dtype=np.float64))
    return np.stack(rows)


def _graph(config: dict, name: str):
    import onnxruntime

    repo = Path(config["model"]["repository"])
    path = repo / json.loads((repo / "manifest.json").read_text())["networks"][name]["path"]
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_network(session, windows: np.ndarray, shard: int = 64) -> np.ndarray:
    """The graph on ``[N, C, K]`` windows, ``shard`` at a time; its first output."""
    name = session.get_inputs()[0].name
    out = [session.run(None, {name: windows[i : i + shard].astype(np.float32)})[0]
           for i in range(0, len(windows), shard)]
    return np.concatenate(out).astype(np.float64)


def cut_windows(samples: np.ndarray, first: int, last: int, kernel: int, stride: int):
    """Windows ``first..last`` (inclusive) of a stream: window j ends at sample (j + 1) S."""
    return np.stack([samples[:, (j + 1) * stride - kernel : (j + 1) * stride]
                     for j in range(first, last + 1)])


def overlap_average(predictions: np.ndarray, first: int, n_samples: int, kernel: int,
                    stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of every window prediction covering each sample (windows ``first``, ...):
    ``(sums / counts, counts)`` over ``n_samples`` stream samples."""
    total = np.zeros((predictions.shape[1], n_samples))
    count = np.zeros(n_samples)
    for i, prediction in enumerate(predictions):
        end = (first + i + 1) * stride
        total[:, end - kernel : end] += prediction
        count[end - kernel : end] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count, count


def bandpass(config: dict, values: np.ndarray) -> np.ndarray:
    from scipy import signal

    d = config["deepclean"]
    sos = signal.butter(int(d["filter_order"]), (float(d["band_low_hz"]),
                        float(d["band_high_hz"])), btype="bandpass",
                        fs=float(config["data"]["sample_rate"]), output="sos")
    return signal.sosfiltfilt(sos, values)


def clustered(time: np.ndarray, values: np.ndarray, cluster_seconds: float, dx: float):
    """Values that are the largest within ``+-cluster_seconds / 2`` (inside the series), the
    first of equal ones: every value in the ``half`` before is smaller."""
    half = int(round(cluster_seconds / 2 / dx))
    keep = [i for i in range(len(values))
            if values[i] >= values[max(0, i - half) : i + half + 1].max()
            and all(values[j] < values[i] for j in range(max(0, i - half), i))]
    return time[keep], values[keep]


def expected_outputs(run_dir: Path) -> tuple[list[Expected], Triggers | None]:
    """Every series (and the triggers) the campaign of ``run_dir`` must hold."""
    config = read_run_config(run_dir)
    mode = config["model"]["mode"]
    rate = float(config["data"]["sample_rate"])
    kernel = round(float(config["model"]["kernel_seconds"]) * rate)
    stride = round(rate / float(config["model"]["inference_rate"]))
    strain = list(config["data"]["channels"])
    ifos = [c.split(":")[0] for c in strain]
    witnesses = list(config["data"].get("witnesses", []))
    first_window = -(-kernel // stride) - 1  # the first window wholly inside the data
    m = kernel // stride
    bbh = config.get("search", {})
    shifts = int(bbh.get("slides", 0)) if mode in ("bbhnet", "e2e") else 0
    lag = round(float(bbh.get("slide_seconds", 1.0)) * rate)
    rolling = mode in ("bbhnet", "e2e") and bbh.get("whitening", "fixed") == "rolling"
    psd_windows = -(-round(float(bbh["psd_seconds"]) * rate) // stride) if rolling else 0
    # windows until the rolling PSD's data are inside the data (slides add none)
    later = psd_windows
    warmup = {"classifier": first_window, "bbhnet": first_window + later,
              "deepclean": 2 * (m - 1), "e2e": 3 * (m - 1) + later}[mode]
    expected: list[Expected] = []
    for a, b in stretches(config, warmup):
        n_windows = round((b - a) * rate) // stride
        if mode in ("classifier", "bbhnet"):
            data = read_stretch(config, strain, a, b)
            first = first_window + (later if mode == "bbhnet" else 0)
            if mode == "classifier":
                windows = cut_windows(data, first, n_windows - 1, kernel, stride)
                statistic = run_network(_graph(config, mode), windows).reshape(-1)
            else:
                statistic, slides = bbhnet_outputs(config, data, first, n_windows - 1, kernel,
                                                   stride, shifts, lag)
            x0 = a + (first + 1) * stride / rate
            expected.append(Expected("statistic", x0, stride / rate, statistic))
            if shifts:
                expected.append(Expected("slides", x0, stride / rate, slides))
            continue
        if kernel % stride:
            raise ValueError("DeepClean's averaging needs K a multiple of S")
        stream = witnesses if mode == "deepclean" else strain + witnesses
        data = read_stretch(config, stream, a, b)
        predictions = run_network(_graph(config, "deepclean"),
                                  cut_windows(data, m - 1, n_windows - 1, kernel, stride))
        average, count = overlap_average(predictions, m - 1, n_windows * stride, kernel, stride)
        complete = slice((m - 1) * stride, (n_windows - m + 1) * stride)
        assert (count[complete] == m).all()
        if mode == "deepclean":
            kept = complete
        else:
            kept = slice((2 * (m - 1) + later) * stride, complete.stop)
            # float32 like the served chain's: whitening (rolling) lifts rounding where
            # the coloured strain is quiet
            cleaned = (data[: len(ifos)].astype(np.float32)
                       - average.astype(np.float32)).astype(np.float64)
            # no cleaned strain outside the complete strides: must not be used
            cleaned[:, : complete.start] = np.nan
            cleaned[:, complete.stop :] = np.nan
            last = n_windows - m  # the last complete stride
            first = 2 * (m - 1) + later
            statistic, slides = bbhnet_outputs(config, cleaned, first, last, kernel, stride,
                                               shifts, lag)
            x0 = a + (2 * m - 1 + later) * stride / rate
            expected.append(Expected("statistic", x0, stride / rate, statistic))
            if shifts:
                expected.append(Expected("slides", x0, stride / rate, slides))
        raw = read_stretch(config, strain, a, b) if mode == "deepclean" else data[: len(ifos)]
        for i, ifo in enumerate(ifos):
            noise = bandpass(config, average[i, kept])
            x0 = a + kept.start / rate
            expected.append(Expected(f"noise/{ifo}", x0, 1 / rate, noise))
            expected.append(Expected(f"clean/{ifo}", x0, 1 / rate, raw[i, kept] - noise))
    return expected, triggers_from(config, expected)


def triggers_from(config: dict, series: list[Expected]) -> Triggers | None:
    """The triggers (and with time slides the background table and FAR/IFAR) of the
    ``statistic`` and ``slides`` series, from their definitions; None in modes without."""
    mode = config["model"]["mode"]
    if mode in ("classifier", "deepclean"):
        return None
    rate = float(config["data"]["sample_rate"])
    stride = round(rate / float(config["model"]["inference_rate"]))
    bbh = config["search"]
    shifts = int(bbh.get("slides", 0))
    lag = round(float(bbh.get("slide_seconds", 1.0)) * rate)
    cluster = float(bbh["cluster_seconds"])
    trigger_times, trigger_values = [], []
    background = {"shift": [], "time": [], "statistic": []}
    livetime = 0.0
    cuts = background_cuts(config) if shifts else []
    for one in series:
        time = one.x0 + np.arange(len(one.values)) * one.dx
        if one.group == "statistic":
            t, v = clustered(time, one.values, cluster, one.dx)
            trigger_times.append(t)
            trigger_values.append(v)
        elif one.group == "slides":
            for k in range(shifts):
                seconds = (k + 1) * lag / rate
                # slide k + 1 exists from the (k + 1) d-th kept window on
                formed = slice((k + 1) * (lag // stride), len(time))
                t, v = clustered(time[formed], one.values[formed, k], cluster, one.dx)
                keep = [i for i in range(len(t)) if not any(
                    a <= t[i] < b or a <= t[i] - seconds < b for a, b in cuts)]
                background["shift"].append(np.full(len(keep), seconds))
                background["time"].append(t[keep])
                background["statistic"].append(v[keep])
                # each formed window its stride (t - dx, t], less either detector's cut time
                spans = union([(u - one.dx, u) for u in time[formed]])
                both = union(cuts + [(a + seconds, b + seconds) for a, b in cuts])
                livetime += sum(b - a for a, b in spans) - sum(
                    b - a for a, b in _intersect(spans, both))
    triggers = Triggers(np.concatenate(trigger_times), np.concatenate(trigger_values))
    if shifts:
        table = {k: np.concatenate(v) for k, v in background.items()}
        # the campaign orders its background by shift, then time
        order = sorted(range(len(table["time"])), key=lambda i: (table["shift"][i],
                                                                 table["time"][i]))
        triggers.background = {k: v[order] for k, v in table.items()}
        noise = triggers.background["statistic"]
        # FAR (n + 1) / L, n the background at least as loud (PyCBC's n_louder convention)
        louder = np.array([int(np.sum(noise >= s)) + 1 for s in triggers.statistic])
        triggers.far = louder / livetime
        triggers.ifar = livetime / louder / (365.25 * 86400)
        triggers.livetime_seconds = livetime
    return triggers


def background_cuts(config: dict) -> list[tuple[float, float]]:
    """``exclusion_seconds`` around every injection and the training spans of the networks
    the search's data went through (BBHnet's; in e2e each interferometer's DeepClean's too),
    when the campaign names injections."""
    bbh = config["search"]
    if not bbh.get("injections"):
        return []
    data = json.loads(Path(bbh["injections"]).read_text())
    rows = data["injections"] if isinstance(data, dict) else data
    width = float(bbh["exclusion_seconds"])
    cuts = [(float(r["gps_time"]) - width, float(r["gps_time"]) + width) for r in rows]
    repo = Path(config["model"]["repository"])
    training = json.loads((repo / "manifest.json").read_text()).get("training") or {}
    return cuts + search_training(config, training)


def bbhnet_outputs(config: dict, data: np.ndarray, first: int, last: int, kernel: int,
                   stride: int, shifts: int, lag: int) -> tuple[np.ndarray, np.ndarray | None]:
    """BBHnet's statistic on windows ``first..last`` of the two detectors' stream ``data``
    (whitened first with ``search.whitening = "rolling"``), and with time slides
    ``[windows, shifts]`` of the first detector's window with the second's ``k * lag``
    samples earlier (``lag`` a whole number of strides) where that window is one of
    ``first..last`` too, NaN where it is not."""
    step = lag // stride
    kept = cut_windows(data, first, last, kernel, stride)
    if config["search"].get("whitening", "fixed") == "rolling":
        kept = np.stack([whiten(config, data, j, kernel, stride)
                         for j in range(first, last + 1)])
    network = _graph(config, "bbhnet")
    statistic = run_network(network, kept).reshape(-1)
    if not shifts:
        return statistic, None
    slides = np.full((len(kept), shifts), np.nan)
    for i in range(len(kept)):  # one window's slides at a time: all of them may not fit
        pairs = [(k, np.stack([kept[i, 0], kept[i - k * step, 1]]))
                 for k in range(1, shifts + 1) if i - k * step >= 0]
        if pairs:
            values = run_network(network, np.stack([p for _, p in pairs]), shard=shifts)
            slides[i, [k - 1 for k, _ in pairs]] = values.reshape(-1)
    return statistic, slides


def whiten(config: dict, data: np.ndarray, j: int, kernel: int, stride: int,
           psd_data: np.ndarray | None = None) -> np.ndarray:
    """Window ``j`` of ``data`` [2, samples] whitened by the PSD of the ``psd_seconds``
    before it in ``psd_data`` (default ``data``; the same samples' times) (Welch: Hann,
    half-overlapping ``psd_fftlength`` segments, mean, no detrend),
    Tukey-tapered over the ``crop / 2`` samples cut from each end, divided by
    ``sqrt(fs PSD / 2)`` in the frequency domain and band-limited by the raised-cosine band
    scaled to unit power."""
    from scipy import signal

    bbh = config["search"]
    rate = float(config["data"]["sample_rate"])
    psd_samples = round(float(bbh["psd_seconds"]) * rate)
    segment = round(float(bbh["psd_fftlength"]) * rate)
    half = round(float(bbh["whitening_crop_seconds"]) * rate) // 2
    end = (j + 1) * stride
    freqs = np.fft.rfftfreq(kernel, 1 / rate)
    low, high = 20.0, 0.8 * rate / 2
    band = np.where((freqs >= 1.5 * low) & (freqs <= 0.9 * high), 1.0, 0.0)
    rise = (freqs >= low) & (freqs < 1.5 * low)
    band[rise] = (1 - np.cos(np.pi * (freqs[rise] - low) / (0.5 * low))) / 2
    fall = (freqs > 0.9 * high) & (freqs <= high)
    band[fall] = (1 + np.cos(np.pi * (freqs[fall] - 0.9 * high) / (0.1 * high))) / 2
    band /= np.sqrt(np.mean(band**2))
    taper = np.ones(kernel)
    ramp = np.sin(np.pi / 2 * (np.arange(half) + 0.5) / half) ** 2 if half else []
    taper[:half], taper[kernel - half :] = ramp, ramp[::-1]
    rows = []
    psd_data = data if psd_data is None else psd_data
    for channel in range(2):
        before = psd_data[channel, end - kernel - psd_samples : end - kernel]
        f, psd = signal.welch(before, rate, window="hann", nperseg=segment,
                              noverlap=segment // 2, detrend=False, average="mean")
        asd = np.sqrt(np.interp(freqs, f, psd) * rate / 2)
        spectrum = np.fft.rfft(data[channel, end - kernel : end] * taper) / asd * band
        rows.append(np.fft.irfft(spectrum, kernel)[half : kernel - half])
    return np.stack(rows)


# ---- the check ---------------------------------------------------------------------------


def read_series(path: Path) -> dict[str, list[tuple[float, float, np.ndarray]]]:
    """``group → [(x0, dx, values)]`` of every time series in a campaign file, by x0."""
    found: dict[str, list[tuple[float, float, np.ndarray]]] = {}
    with h5py.File(path, "r") as f:
        def visit(name: str, item) -> None:
            if isinstance(item, h5py.Dataset) and "x0" in item.attrs:
                group = name.rsplit("/", 1)[0]
                found.setdefault(group, []).append(
                    (float(item.attrs["x0"]), float(item.attrs["dx"]), item[()]))
        f.visititems(visit)
    return {group: sorted(rows, key=lambda r: r[0]) for group, rows in found.items()}


def analysed_spans(campaign: h5py.File, trim_seconds: float = 0.0) -> list[tuple[float, float]]:
    """The analysed time of a campaign file: each ``statistic`` series' ``[x0 - dx,
    x0 + (n - 1) dx)`` (a window's time is its end), ``trim_seconds`` off each end (a
    control)."""
    return [(x0 - dx + trim_seconds, x0 + (len(d) - 1) * dx - trim_seconds)
            for d in campaign["statistic"].values()
            for x0, dx in [(float(d.attrs["x0"]), float(d.attrs["dx"]))]]


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """``max |actual - expected| / max |expected|``; inf when either holds NaN or Inf or the
    lengths differ."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        return math.inf
    if not (np.isfinite(actual).all() and np.isfinite(expected).all()):
        return math.inf
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    error = float(np.abs(actual - expected).max()) if expected.size else 0.0
    return error / scale if scale else (0.0 if error == 0 else math.inf)


def check_campaign(campaign: Path, run_dir: Path, tolerance: float = 1e-4) -> list[str]:
    """Every difference between ``campaign`` and the oracle's prediction, as sentences
    (empty: the campaign is right).

    Every value is compared with the prediction. The triggers, the background table and
    the FAR are then recomputed from the campaign's own statistic and slides: clustering is
    not continuous in the values, and two neighbours within float32 noise of each other
    (6.54312 against 6.54313) may swap which one is the cluster's maximum.
    """
    return run_problems(run_dir, tolerance=tolerance, campaign=campaign)


def run_problems(run_dir: Path, series: dict | None = None, triggers: Triggers | None = None,
                 tolerance: float = 1e-4, campaign: Path | None = None) -> list[str]:
    """``check_campaign`` of the run's output, or of ``series``/``triggers`` read from it and
    changed (the negative controls: the triggers expected still come from the file's
    statistic, so a changed series fails on its own group)."""
    expected, _ = expected_outputs(run_dir)
    campaign = run_dir / "output" / "campaign.h5" if campaign is None else campaign
    series = read_series(campaign) if series is None else series
    triggers = read_triggers(campaign) if triggers is None else triggers
    return compare_with(series, triggers, expected, own_triggers(run_dir, campaign), tolerance)


def own_triggers(run_dir: Path, campaign: Path) -> Triggers | None:
    """``triggers_from`` the campaign file's own statistic and slides series."""
    stored = read_series(campaign)
    return triggers_from(read_run_config(run_dir), [
        Expected(group, x0, dx, values) for group in ("statistic", "slides")
        for x0, dx, values in stored.get(group, [])])


def read_triggers(path: Path) -> Triggers | None:
    with h5py.File(path, "r") as f:
        if "triggers" not in f:
            return None
        table = f["triggers"][()]
        background = f["background"][()] if "background" in f else None
    triggers = Triggers(table["time"].astype(np.float64), table["statistic"].astype(np.float64))
    if "far" in (table.dtype.names or ()):
        triggers.far, triggers.ifar = table["far"], table["ifar"]
    if background is not None:
        triggers.background = {name: background[name].astype(np.float64)
                               for name in background.dtype.names}
    return triggers


def compare_with(series: dict, triggers: Triggers | None, expected: list[Expected],
                 expected_triggers: Triggers | None, tolerance: float) -> list[str]:
    """The check of ``check_campaign`` on series already read (the negative controls shift
    them)."""
    problems = []
    groups = sorted({e.group for e in expected})
    if sorted(series) != groups:
        problems.append(f"groups {sorted(series)}, expected {groups}")
    for group in groups:
        want = [e for e in expected if e.group == group]
        have = series.get(group, [])
        if len(have) != len(want):
            problems.append(f"{group}: {len(have)} stretches, expected {len(want)}")
            continue
        for (x0, dx, values), e in zip(have, want, strict=True):
            where = f"{group} at {e.x0:.6f}"
            if not abs(x0 - e.x0) <= TIME_TOLERANCE_SECONDS:
                problems.append(f"{where}: x0 {x0:.6f}")
            if not abs(dx - e.dx) <= 1e-12:
                problems.append(f"{where}: dx {dx}, expected {e.dx}")
            if len(values) != len(e.values):
                problems.append(f"{where}: {len(values)} samples, expected {len(e.values)}")
                continue
            if group == "slides":  # NaN: a slide not formed there
                if not np.array_equal(np.isnan(values), np.isnan(e.values)):
                    problems.append(f"{where}: slides formed at other windows than expected")
                    continue
                values, e = values[~np.isnan(values)], Expected(
                    group, e.x0, e.dx, e.values[~np.isnan(e.values)])
            error = relative_error(values, e.values)
            if not error <= tolerance:
                problems.append(f"{where}: relative error {error:.3g} > {tolerance:g}")
    if (triggers is None) != (expected_triggers is None):
        problems.append(f"triggers table {'missing' if triggers is None else 'unexpected'}")
    elif triggers is not None:
        if len(triggers.time) != len(expected_triggers.time):
            problems.append(f"triggers: {len(triggers.time)} rows, expected "
                            f"{len(expected_triggers.time)}")
        else:
            worst = float(np.abs(triggers.time - expected_triggers.time).max(initial=0.0))
            if not worst <= TIME_TOLERANCE_SECONDS:
                problems.append(f"triggers: times differ by up to {worst:.3g} s")
            error = relative_error(triggers.statistic, expected_triggers.statistic)
            if not error <= tolerance:
                problems.append(f"triggers: statistic relative error {error:.3g}")
            problems += _compare_slides(triggers, expected_triggers, tolerance)
    return problems


def _compare_slides(triggers: Triggers, expected: Triggers, tolerance: float) -> list[str]:
    """The FAR/IFAR columns and the background table against the oracle's."""
    if (triggers.far is None) != (expected.far is None):
        return [f"triggers: far column {'missing' if triggers.far is None else 'unexpected'}"]
    if (triggers.background is None) != (expected.background is None):
        return ["background table " + ("missing" if triggers.background is None
                                       else "unexpected")]
    if expected.far is None:
        return []
    problems = []
    for name in ("far", "ifar"):
        error = relative_error(getattr(triggers, name), getattr(expected, name))
        if not error <= tolerance:
            problems.append(f"triggers: {name} relative error {error:.3g}")
    have, want = triggers.background, expected.background
    if len(have["time"]) != len(want["time"]):
        return problems + [f"background: {len(have['time'])} rows, expected "
                           f"{len(want['time'])}"]
    worst = float(np.abs(have["time"] - want["time"]).max(initial=0.0))
    if not worst <= TIME_TOLERANCE_SECONDS:
        problems.append(f"background: times differ by up to {worst:.3g} s")
    if not np.array_equal(have["shift"], want["shift"]):
        problems.append("background: shifts differ")
    error = relative_error(have["statistic"], want["statistic"])
    if not error <= tolerance:
        problems.append(f"background: statistic relative error {error:.3g}")
    return problems
