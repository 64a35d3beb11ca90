"""Stateful steps of a stream, one state per sequence (Triton python backend).

This file is copied verbatim into the model repository: as ``<model>/<version>/model.py`` of each
stateful model of an ``--ensemble`` repository, and beside the fused model (``fused.py``, the
cpu flavor's default), whose per-sequence step is ``ModeStream``; the in-process reference
imports ``ModeStream`` from it, so the server and the reference run the same code. It depends
on numpy only (``triton_python_backend_utils`` exists only in the server's python stub).

``snapshot`` (parameter ``kind``)
    A request carries ``[1, channels, n * stride]`` new samples and yields ``[1, n, channels,
    kernel]``: the window after each stride of new samples.
``timeslide`` (fused model only)
    BBHnet's background: ``[n, 2, kernel]`` windows in, ``[n * slides]`` statistics out, the
    second detector slid against the first (``TimeSlides``, which runs the network it names);
    ``streamed_timeslide`` the same from ``[2, n * stride]`` samples, each slide a stream of
    the network it names streamed layer by layer (``StreamedTimeSlides``, ``model.streamed``);
    NaN where a slide's second window lies in the stream's warm-up.
``whiten`` (fused model only)
    BBHnet's rolling whitening: ``[2, n * stride]`` in, ``[n, 2, kernel - crop]`` windows out,
    each whitened with the PSD of the data before it (``RollingWhitening``); a foreground's
    requests carry the clean strain at the same times too (``psd_update``), whose PSD whitens
    the injected strain.
``streamed`` (fused model only; issue #42: BBHnet with ``model.streamed``)
    A network streamed layer by layer (``streamed_network.StreamedNetwork``): ``[channels,
    n * stride]`` new samples in, ``[n]`` statistics out, equal to the snapshotter's windows
    through the whole-window network; its per-stream ``StreamState`` is kept here (per stage:
    e2e streams BBHnet on the cleaned and on the raw strain), the runner (the ``sessions``
    entry of the network its ``params`` name) is shared by every stream and stage.
``average``
    DeepClean's online averaging: ``[1, n, ifos, kernel]`` window predictions in, ``[1, ifos,
    n * stride]`` averaged samples out, ``kernel - stride`` samples behind the windows' ends.

State starts at zeros on START, is freed on END, and is dropped after ``idle_seconds`` without a
request (Triton does not tell a python model when it evicts an idle sequence).

Averaging: a stream's window ``j`` covers stream samples ``[(j + 1) S - K, (j + 1) S)``; with
``m = K / S`` (a whole number) every sample is covered by ``m`` windows. After window ``j`` the
oldest stride of that window is covered by no later window: it is emitted as the sum of its
``m`` predictions divided by ``m``. The first ``m - 1`` strides a stream emits lie before its
first sample; the averaged strides are clean (every window in them holds real data) from the
stream's window ``2 (m - 1)`` on — the campaign's ``warmup_windows`` in the DeepClean modes.
"""

from __future__ import annotations

import time

import numpy as np


class SnapshotState:
    """The latest ``kernel_samples`` of each channel of one stream.

    Parameters
    ----------
    channels, kernel_samples, stride_samples
        Shape of the state and of the updates.
    """

    def __init__(self, channels: int, kernel_samples: int, stride_samples: int) -> None:
        self.kernel_samples = kernel_samples
        self.stride_samples = stride_samples
        self.state = np.zeros((channels, kernel_samples), dtype=np.float32)

    def update(self, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n * stride]; return the n windows [n, channels, kernel]."""
        n = samples.shape[-1] // self.stride_samples
        windows = np.empty((n, self.state.shape[0], self.kernel_samples), np.float32)
        self.windows_into(samples, windows)
        return windows

    def windows_into(self, samples: np.ndarray, out: np.ndarray) -> None:
        """``update``, writing the n windows into ``out`` [n, channels, kernel] (a caller's
        preallocated batch) instead of a new array."""
        n_samples = samples.shape[-1]
        if n_samples % self.stride_samples:
            raise ValueError(f"update of {n_samples} samples is not a multiple of the stride "
                             f"({self.stride_samples} samples)")
        full = np.concatenate([self.state, samples.astype(np.float32, copy=False)], axis=1)
        # window j ends after (j + 1) strides of new samples: full[:, (j+1)s : (j+1)s + kernel]
        views = np.lib.stride_tricks.sliding_window_view(full, self.kernel_samples, axis=1)
        np.copyto(out, views[:, self.stride_samples :: self.stride_samples].transpose(1, 0, 2))
        self.state = full[:, n_samples:].copy()



class TimeSlides:
    """BBHnet's background of a two-detector stream: the second detector slid against the first.

    For each window ``j`` of the stream and each slide ``k = 1 .. slides``, the network runs
    on the first detector's window ``j`` with the second detector's window
    ``j - k * slide_windows`` (``Δ`` is a whole number of strides, so a slid window is an
    earlier window of the same stream, whitened or not). The state is the second detector's
    last ``slides * slide_windows`` windows, so the client sends each sample once whatever the
    number of slides. Slid pairs are formed and run ``BATCH_WINDOWS`` at a time (a request's
    ``n * slides`` windows would not fit in the caches).

    A slide is formed only where its second window is a real window of the stream (index
    ``>= warmup_windows``, the rows a stream discards while its state fills); elsewhere it is
    NaN, and the network does not run. From a stretch's start that is the campaign's
    definition (both windows kept windows of the stretch); a stream begun inside a stretch
    carries the longest slide's history before its first kept window, so all its kept
    windows' slides are formed.

    Parameters
    ----------
    slide_windows, slides
        The step ``Δ`` between slides (windows) and their number ``N``.
    warmup_windows
        Rows at the start of a stream that are not real windows.
    """

    BATCH_WINDOWS = 256

    def __init__(self, slide_windows: int, slides: int, warmup_windows: int) -> None:
        self.slid_by_windows = slide_windows * np.arange(1, slides + 1)
        self.history = slide_windows * slides
        self.warmup_windows = warmup_windows
        self.past: np.ndarray | None = None
        """The second detector's latest ``history`` windows (zeros before the first)."""
        self.streamed = 0
        """Windows received since START."""

    def update(self, windows: np.ndarray, network) -> np.ndarray:
        """Add ``windows`` [n, 2, K]; return ``network`` (``[m, 2, K]`` → ``[m]``) on every
        window's slides, ``[n * slides]``: the slides of window 0, then of window 1, ...
        (NaN where a slide is not formed)."""
        n, slides = len(windows), len(self.slid_by_windows)
        if windows.ndim != 3 or windows.shape[1] != 2:
            raise ValueError(f"time slides take [n, 2, kernel] windows, got "
                             f"{list(windows.shape)}")
        if self.past is None:
            self.past = np.zeros((self.history, windows.shape[2]), np.float32)
        second = np.concatenate([self.past, windows[:, 1]])
        # pair (j, k) at row j * slides + k - 1; its second window is second[history + j - k Δ],
        # window streamed + j - lag of the stream
        j = np.repeat(np.arange(n), slides)
        slid = self.history + j - np.tile(self.slid_by_windows, n)
        runs = np.flatnonzero(formed_slides(self.streamed, n, self.slid_by_windows,
                                            self.warmup_windows))
        out = np.full(n * slides, np.nan, np.float32)
        pairs = np.empty((self.BATCH_WINDOWS, 2, windows.shape[2]), np.float32)
        for first in range(0, len(runs), self.BATCH_WINDOWS):
            rows = runs[first : first + self.BATCH_WINDOWS]
            batch = pairs[: len(rows)]
            batch[:, 0] = windows[j[rows], 0]
            batch[:, 1] = second[slid[rows]]
            out[rows] = network(batch)
        self.past = second[len(second) - self.history :].copy()
        self.streamed += n
        return out


def slide_arguments(params: dict) -> dict[str, int]:
    """``TimeSlides``' arguments from its stage spec's (``shift_windows`` and ``shifts`` where
    it was exported before the spec took the glossary's names)."""
    key = {"slide_windows": "shift_windows", "slides": "shifts"} if "shifts" in params else {}
    return {k: params[key.get(k, k)] for k in ("slide_windows", "slides", "warmup_windows")}


def formed_slides(streamed: int, n: int, slid_by_windows: np.ndarray, warmup_windows: int
                  ) -> np.ndarray:
    """Which of the next ``n`` windows' slides are formed, ``[n * slides]`` in ``TimeSlides``'
    order: those whose second window (``streamed + j - lag``) is a real window of the stream."""
    j = np.repeat(np.arange(n), len(slid_by_windows))
    return streamed + j - np.tile(slid_by_windows, n) >= warmup_windows


class StreamedTimeSlides:
    """``TimeSlides`` on a network streamed layer by layer (``model.streamed``): both
    detectors are whitened once (the runner's ``split_whitening``), and slide ``k`` is a
    stream of its own on the whitened samples, the first detector's beside the second's
    ``k Δ S`` earlier, so its window ``j`` is ``TimeSlides``' pair (window ``j``, window ``j -
    k Δ``). The state is the whitening's, each slide's, and the second detector's last
    ``slides Δ S`` whitened samples (zeros before the stream); the output is ``TimeSlides``'.

    Parameters
    ----------
    slide_windows, slides, warmup_windows
        As ``TimeSlides``'.
    stride_samples
        ``S``.
    runner
        The streamed network, shared (its ``split_whitening``).
    """

    def __init__(self, slide_windows: int, slides: int, warmup_windows: int,
                 stride_samples: int, runner) -> None:
        self.slid_by_windows = slide_windows * np.arange(1, slides + 1)
        self.delays = self.slid_by_windows * stride_samples
        self.warmup_windows, self.stride_samples = warmup_windows, stride_samples
        self.whitening, self.runner = runner.split_whitening()  # each detector whitened once
        self.whitened = self.whitening.initial_state()
        self.states = [self.runner.initial_state() for _ in self.slid_by_windows]
        self.past = np.zeros(int(self.delays[-1]), np.float32)  # whitened, as every slide's
        self.streamed = 0

    def update(self, samples: np.ndarray) -> np.ndarray:
        """Add ``samples`` [2, n S]; return every window's slides, ``[n * slides]``."""
        if samples.ndim != 2 or samples.shape[0] != 2:
            raise ValueError(f"time slides take [2, n * stride] samples, got {samples.shape}")
        m, history = samples.shape[1], len(self.past)
        n = m // self.stride_samples
        whitened = self.whitening.update(self.whitened, samples)
        second = np.concatenate([self.past, whitened[1]])
        out = np.empty((n, len(self.slid_by_windows)), np.float32)
        for k, (delay, state) in enumerate(zip(self.delays, self.states, strict=True)):
            slid = np.stack([whitened[0], second[history - delay : history - delay + m]])
            out[:, k] = self.runner.update(state, slid)
        out = out.ravel()
        out[~formed_slides(self.streamed, n, self.slid_by_windows, self.warmup_windows)] = np.nan
        self.past = second[len(second) - history :].copy()
        self.streamed += n
        return out


class RollingWhitening:
    """Whitens each window of a stream with a PSD estimated from the data just before it.

    The PSD's data are the stream's own, or, for a stream whose requests carry them, the
    ``psd_update`` samples at the same times (a foreground's clean strain: the injections are
    whitened with the background's PSD, so a loud one does not whiten itself away).

    Window ``j`` (``[(j + 1) S - K, (j + 1) S)``) is whitened with the Welch PSD of the
    ``psd_samples`` before it: Hann-windowed segments of ``fft_samples``, half overlapping,
    periodograms averaged (mean). The window is multiplied by a Tukey taper (rising over the
    ``crop_samples / 2`` cut from each end), Fourier transformed, divided by
    ``sqrt(fs PSD / 2)`` (the PSD interpolated to the window's frequencies), multiplied by
    ``band`` (its gain at each of the window's frequencies, normalised here to unit output
    variance), transformed back and cut by ``crop_samples / 2`` at each end:
    ``[n, channels, K - crop_samples]`` out, unit-variance white noise in the band where the
    data is Gaussian.

    Parameters
    ----------
    channels, kernel_samples, stride_samples
        The stream's geometry.
    psd_samples, fft_samples, crop_samples
        Welch's data and segment length, and the crop.
    sample_rate, band
        Model rate, and the band's gain at ``rfftfreq(K, 1 / sample_rate)``.
    """

    def __init__(self, channels: int, kernel_samples: int, stride_samples: int,
                 psd_samples: int, fft_samples: int, crop_samples: int, sample_rate: float,
                 band: list) -> None:
        self.channels = channels
        self.stride_samples = stride_samples
        self.snapshot: SnapshotState | None = None
        """``psd_samples + kernel_samples`` of the stream (and of its ``psd_update``)."""
        self.kernel_samples = kernel_samples
        self.psd_samples = psd_samples
        self.fft_samples = fft_samples
        self.crop_samples = crop_samples
        self.sample_rate = sample_rate
        self.segment_window = np.hanning(fft_samples + 1)[:-1]  # periodic Hann
        self.segment_freqs = np.fft.rfftfreq(fft_samples, 1 / sample_rate)
        self.window_freqs = np.fft.rfftfreq(kernel_samples, 1 / sample_rate)
        band = np.asarray(band, np.float64)
        if band.shape != self.window_freqs.shape:
            raise ValueError(f"the whitening band has {band.size} values, the window "
                             f"{self.window_freqs.size} frequencies")
        self.band = band / np.sqrt(np.mean(band**2))
        self.taper = tukey(kernel_samples, crop_samples // 2)

    def update(self, samples: np.ndarray, psd_update: np.ndarray | None = None
               ) -> np.ndarray:
        """Append ``samples`` [channels, n S] (and ``psd_update``, the samples at the same
        times whose PSD whitens them: every request of a stream carries it or none does);
        return the n whitened windows."""
        rows = samples if psd_update is None else np.concatenate([samples, psd_update])
        if self.snapshot is None:
            self.snapshot = SnapshotState(len(rows), self.psd_samples + self.kernel_samples,
                                          self.stride_samples)
        elif len(rows) != self.snapshot.state.shape[0]:
            raise ValueError("psd_update in some requests of a stream and not in others: a "
                             "stream's requests carry it in all of them or in none")
        long = self.snapshot.update(rows).astype(np.float64)  # [n, rows, P + K]
        # the PSD of the last `channels` rows: psd_update's, or the samples' own
        psd = self.welch(long[:, -self.channels :, : self.psd_samples])
        window = long[:, : self.channels, self.psd_samples :]
        asd = np.sqrt(np.stack([[np.interp(self.window_freqs, self.segment_freqs, p)
                                 for p in row] for row in psd]) * self.sample_rate / 2)
        spectrum = np.fft.rfft(window * self.taper, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            white = np.where(asd > 0, spectrum * self.band / asd, 0.0)
        whitened = np.fft.irfft(white, n=self.kernel_samples, axis=-1)
        half = self.crop_samples // 2
        return whitened[..., half : self.kernel_samples - half].astype(np.float32)

    def welch(self, data: np.ndarray) -> np.ndarray:
        """One-sided PSD density of ``data`` [..., psd_samples] (the class docstring)."""
        f, step = self.fft_samples, self.fft_samples // 2
        segments = np.lib.stride_tricks.sliding_window_view(data, f, axis=-1)[..., ::step, :]
        power = np.abs(np.fft.rfft(segments * self.segment_window, axis=-1)) ** 2
        power = power.mean(axis=-2) / (self.sample_rate * np.sum(self.segment_window**2))
        power[..., 1 : (f + 1) // 2] *= 2  # one-sided: every bin but DC (and Nyquist)
        return power


def tukey(length: int, ramp: int) -> np.ndarray:
    """1 in the middle, a half-cosine rise over the first ``ramp`` samples and fall over the
    last ``ramp``."""
    out = np.ones(length)
    if ramp > 0:
        rise = 0.5 - 0.5 * np.cos(np.pi * (np.arange(ramp) + 0.5) / ramp)
        out[:ramp], out[length - ramp :] = rise, rise[::-1]
    return out


class OnlineAverage:
    """Averages a stream's overlapping window predictions as the windows arrive.

    Parameters
    ----------
    kernel_samples, stride_samples
        Window length ``K`` and stride ``S``; ``K`` must be a multiple of ``S`` and longer.
    channels
        Predictions per window (``[n, channels, K]`` in, ``[channels, n * S]`` out); ``None``
        for ``[n, K]`` in, ``[n * S]`` out.
    """

    def __init__(self, kernel_samples: int, stride_samples: int, channels: int | None = None):
        if kernel_samples % stride_samples or kernel_samples <= stride_samples:
            raise ValueError(
                f"online averaging needs a kernel ({kernel_samples}) that is a multiple of the "
                f"stride ({stride_samples}) and longer"
            )
        self.kernel_samples = kernel_samples
        self.stride_samples = stride_samples
        self.overlap = kernel_samples // stride_samples
        self.lead = () if channels is None else (channels,)
        # partial sums of the next m - 1 strides
        self.state = np.zeros((self.overlap - 1, *self.lead, stride_samples), dtype=np.float64)

    def update(self, predictions: np.ndarray) -> np.ndarray:
        """Add ``[n, (channels,) K]`` predictions; return the ``n * S`` samples now complete."""
        n, kernel, s, m = len(predictions), predictions.shape[-1], self.stride_samples, self.overlap
        if kernel != self.kernel_samples or predictions.shape[1:-1] != self.lead:
            raise ValueError(
                f"predictions of shape {predictions.shape[1:]}, expected "
                f"{(*self.lead, self.kernel_samples)} per window"
            )
        strides = predictions.reshape(n, *self.lead, m, s)
        total = np.zeros((n + m - 1, *self.lead, s))
        total[: m - 1] += self.state
        for offset in range(m):  # stride `offset` of window j lands on stride j + offset
            total[offset : offset + n] += strides[..., offset, :]
        self.state = total[n:].copy()
        done = total[:n] / m  # [n, (channels,) S]
        return np.moveaxis(done, 0, -2).reshape(*self.lead, n * s)


DEVICES = ("cpu", "cuda")
"""Where a session runs its graph: onnxruntime's CPU provider, or CUDA (the gpu flavor)."""


def open_session(path: str, device: str = "cpu", device_id: int = 0, threads: int = 1):
    """An onnxruntime session of the graph at ``path`` on ``device`` (GPU ``device_id``).

    ``cuda`` puts the CUDA provider first and the CPU provider behind it (for any node CUDA
    lacks). An onnxruntime without the CUDA provider is an error, not a silent fall back to
    the CPU: a GPU slot whose networks ran on its host would look healthy and be slow.
    """
    import onnxruntime

    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r} (known: {', '.join(DEVICES)})")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if device == "cpu":
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    available = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise RuntimeError(
            f"device 'cuda' needs onnxruntime's CUDAExecutionProvider; this onnxruntime "
            f"{onnxruntime.__version__} has {available}: install onnxruntime-gpu in the "
            "server's Python (containers/server.def), or export --flavor cpu"
        )
    providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
    session = onnxruntime.InferenceSession(path, options, providers=providers)
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"{path}: onnxruntime could not open a CUDA session on GPU "
                           f"{device_id} (providers in use: {session.get_providers()})")
    return session


def run_graph(session, feeds: dict) -> dict:
    """Run a network graph on unbatched tensors (adding Triton's batch axis where it takes it:
    ``subtract``); ``session`` is an onnxruntime session."""
    ranks = {i.name: len(i.shape) for i in session.get_inputs()}
    batched = any(ranks[name] == value.ndim + 1 for name, value in feeds.items())
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: (v[None] if batched else v) for k, v in feeds.items()})
    return {n: (v[0] if batched else v) for n, v in zip(names, values, strict=True)}


PSD_UPDATE = "psd_update"
"""The optional request input of the strain whose PSD whitens a foreground (``pipeline``)."""


class ModeStream:
    """A campaign mode's whole chain of stages for one stream: ``update`` → its outputs.

    This is the fused model's step (``fused.py``: one per sequence) and the reference's
    (``pipeline.mode_stream``), so both run the same code.

    Parameters
    ----------
    stages
        The mode's stages in order (``pipeline.Stage.to_dict``): ``model``, ``kind``
        (``snapshot``, ``average`` or ``network``), ``inputs``/``outputs`` (model tensor →
        chain tensor) and ``channels`` (of a stateful stage).
    kernel_samples, stride_samples
        Window and stride of the stream.
    outputs
        The chain tensors returned (``statistic``, ``noise``).
    sessions
        One onnxruntime session per network stage (model name → session), and a
        ``StreamedNetwork`` per ``streamed`` stage, shared by streams.
    """

    def __init__(self, stages: list, kernel_samples: int, stride_samples: int,
                 outputs: list, sessions: dict) -> None:
        self.stages = stages
        self.outputs = list(outputs)
        self.sessions = sessions
        self.states = {}
        for stage in stages:
            if stage["kind"] == "snapshot":
                self.states[stage["model"]] = SnapshotState(
                    stage["channels"], kernel_samples, stride_samples)
            elif stage["kind"] == "average":
                self.states[stage["model"]] = OnlineAverage(
                    kernel_samples, stride_samples, stage["channels"])
            elif stage["kind"] == "timeslide":
                self.states[stage["model"]] = TimeSlides(**slide_arguments(stage["params"]))
            elif stage["kind"] == "streamed_timeslide":
                self.states[stage["model"]] = StreamedTimeSlides(
                    **slide_arguments(stage["params"]), stride_samples=stride_samples,
                    runner=sessions[stage["params"]["network"]])
            elif stage["kind"] == "whiten":
                self.states[stage["model"]] = RollingWhitening(
                    stage["channels"], kernel_samples, stride_samples, **stage["params"])
            elif stage["kind"] == "streamed":
                self.states[stage["model"]] = sessions[
                    stage["params"]["network"]].initial_state()

    def update(self, samples: np.ndarray, psd_update: np.ndarray | None = None) -> dict:
        """Feed ``[channels, n S]`` new samples; return ``{output: values}`` (no batch axis).

        ``psd_update`` (a foreground with the rolling whitening): the clean strain at the
        same times, whose PSD the ``whiten`` stage whitens ``samples`` with."""
        tensors = {"update": samples}
        if psd_update is not None:
            if not any(PSD_UPDATE in s["inputs"].values() for s in self.stages):
                raise ValueError(f"{PSD_UPDATE} sent to a chain that takes none (exported "
                                 "without the rolling whitening, or by another version)")
            tensors[PSD_UPDATE] = psd_update
        for stage in self.stages:
            feeds = {name: tensors[source] for name, source in stage["inputs"].items()
                     if source in tensors}
            if stage["kind"] == "network":
                result = run_graph(self.sessions[stage["model"]], feeds)
            elif stage["kind"] == "whiten":
                (name,) = stage["outputs"]
                result = {name: self.states[stage["model"]].update(
                    feeds["update"], feeds.get(PSD_UPDATE)).astype(np.float32, copy=False)}
            elif stage["kind"] == "streamed":
                (value,) = feeds.values()
                (name,) = stage["outputs"]
                result = {name: self.sessions[stage["params"]["network"]].update(
                    self.states[stage["model"]], value)}
            elif stage["kind"] == "timeslide":
                (value,) = feeds.values()
                (name,) = stage["outputs"]
                result = {name: self.states[stage["model"]].update(
                    value, self._network(stage["params"]["network"]))}
            elif stage["kind"] == "streamed_timeslide":
                (value,) = feeds.values()
                (name,) = stage["outputs"]
                result = {name: self.states[stage["model"]].update(value)}
            else:
                (value,) = feeds.values()
                (name,) = stage["outputs"]
                result = {name: self.states[stage["model"]].update(value).astype(
                    np.float32, copy=False)}
            for name, target in stage["outputs"].items():
                tensors[target] = result[name]
        return {name: tensors[name] for name in self.outputs}

    def _network(self, model: str):
        """``windows → values`` of a single-input, single-output network stage's graph."""
        session = self.sessions[model]
        name = session.get_inputs()[0].name
        return lambda windows: session.run(None, {name: windows})[0]


def sequence_step(streams: dict, corrid: int, start: bool, end: bool, now: float, new_state,
                  values: np.ndarray, what: str, psd_update: np.ndarray | None = None
                  ) -> tuple:
    """One request of sequence ``corrid``: a new state on START (``new_state()``), the kept
    one otherwise; ``update(values)`` (``update(values, psd_update)`` with one); the state
    freed on END. ``streams`` maps a correlation ID to ``(state, last seen)``. Returns
    ``(result, None)`` or ``(None, error message)``."""
    if start:
        stream = new_state()
    elif corrid in streams:
        stream = streams[corrid][0]
    else:
        return None, (f"sequence {corrid} has no {what} state on this server (evicted or the "
                      "server restarted): send START again")
    try:
        result = (stream.update(values) if psd_update is None
                  else stream.update(values, psd_update))
    except ValueError as err:
        return None, str(err)
    if end:
        streams.pop(corrid, None)
    else:
        streams[corrid] = (stream, now)
    return result, None


def keep_freed_memory() -> bool:
    """Keep what numpy frees in this process's heap (glibc ``mallopt``: arrays under 32 MiB
    from the heap, its top returned to the system past 64 MiB), so that a step does not
    fault its arrays' pages in again each request (glibc's default: about 700 page faults,
    25 % of a streamed DeepClean request). False where the C library has no ``mallopt``."""
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    m_trim_threshold, m_mmap_threshold = -1, -3
    return mallopt is not None and bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(
        mallopt(m_trim_threshold, 64 << 20))


def drop_idle(streams: dict, now: float, idle_seconds: float) -> None:
    """Forget the sequences without a request for ``idle_seconds`` (Triton does not tell a
    python model when it evicts an idle sequence)."""
    for key in [k for k, (_, seen) in streams.items() if now - seen > idle_seconds]:
        del streams[key]


class TritonPythonModel:
    """Triton python-backend model around one stateful step, one state per correlation ID."""

    def initialize(self, args: dict) -> None:
        import server_watch  # beside model.py: the stub puts this directory on sys.path
        import triton_python_backend_utils as pb_utils

        config, params = server_watch.start_stub(args)
        self.pb = pb_utils
        self.kind = params["kind"]
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.channels = int(params["channels"])
        self.kernel_samples = int(params["kernel_samples"])
        self.stride_samples = int(params["stride_samples"])
        self.idle_seconds = float(params["idle_seconds"])
        self.streams: dict[int, tuple[SnapshotState | OnlineAverage, float]] = {}

    def _new_state(self) -> SnapshotState | OnlineAverage:
        if self.kind == "snapshot":
            return SnapshotState(self.channels, self.kernel_samples, self.stride_samples)
        return OnlineAverage(self.kernel_samples, self.stride_samples, self.channels)

    def _zeros(self, values: np.ndarray) -> np.ndarray:
        if self.kind == "snapshot":
            n_windows = values.shape[-1] // self.stride_samples
            return np.zeros((1, n_windows, self.channels, self.kernel_samples), np.float32)
        return np.zeros((1, self.channels, values.shape[0] * self.stride_samples), np.float32)

    def execute(self, requests: list) -> list:
        pb = self.pb
        now = time.monotonic()
        responses = []
        for request in requests:
            values = pb.get_input_tensor_by_name(request, self.input_name).as_numpy()[0]
            start = bool(pb.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            end = bool(pb.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
            corrid = int(pb.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            if corrid == 0:
                # Triton's direct batcher fills idle slots with null requests (CORRID 0); their
                # responses are discarded, so answer with zeros and touch no state.
                responses.append(self._response(self._zeros(values)))
                continue
            result, error = sequence_step(self.streams, corrid, start, end, now,
                                          self._new_state, values, self.kind)
            if error is not None:
                responses.append(pb.InferenceResponse(error=pb.TritonError(error)))
                continue
            responses.append(self._response(result[None].astype(np.float32, copy=False)))
        drop_idle(self.streams, now, self.idle_seconds)
        return responses

    def _response(self, values: np.ndarray):
        return self.pb.InferenceResponse([self.pb.Tensor(self.output_name, values)])
