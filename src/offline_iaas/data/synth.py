"""Synthetic GWF dataset: coloured Gaussian strain, witness channels coupled into it, injections.

For every interferometer ``X`` named by a prefix of ``data.channels`` (``H1``, ``L1``, ...),
``write_synthetic_dataset`` writes one GWF file per ``synth.file_duration`` seconds named
``<O>-<X>_<DESC>-<GPS>-<DUR>.gwf`` (``O`` = first letter of ``X``), covering
``[data.start, data.start + data.duration)`` rounded up to whole files. Each file holds every
strain channel of ``X`` and the witnesses ``X:PEM-SYNTH_WITNESS_<i>``, all float64 at
``synth.frame_sample_rate`` (``fs``); the witnesses at ``synth.witness_sample_rate`` if set
(``fs / q``, ``q`` a whole number: every ``q``-th sample of the witness generated at ``fs``,
so the coupling formula holds at the witness samples' times). Everything is drawn from
``synth.seed``: one random stream per channel (keyed by its name), so the data are
deterministic and do not depend on ``file_duration`` (files of 8 s and one file of 24 s hold
bit-identical samples).

Model (``tau = t - data.start`` in seconds)::

    strain = n + kappa * s * (w0 + w0 * w1) + sum_j A * g(tau - tau_j - dt_j(X))

Noise ``n``
    White Gaussian noise of variance ``fs / 2`` through a linear-phase FIR filter of ``2 fs``
    taps (frequency sampling of the ASD, periodic Hann window), whose gain is the aLIGO design
    ASD (``LIGO-T1800044-v5``, shipped in lalsuite; held constant outside its 5-5000 Hz table).
    Its one-sided PSD is then ~ ASD(f)^2. The filter runs overlap-save over fixed blocks of
    ``BLOCK_SAMPLES`` samples carrying the last ``taps - 1`` input samples, so the noise is one
    continuous stream with no seam at file boundaries.
Witnesses
    ``w0 = a(tau) sin(2 pi f_line tau + phi)`` with a slowly wandering amplitude
    ``a = 1 + 0.3 sin(2 pi tau / P1 + psi1) + 0.2 sin(2 pi tau / P2 + psi2)``
    (``P1`` in [30, 90] s, ``P2`` in [7, 20] s, phases random per interferometer);
    ``w1`` slow Gaussian noise of unit variance, gain ``1 / (1 + (f / 2 Hz)^4)``;
    ``w_i`` (i >= 2) unit white noise, not coupled. Without ``w1`` the bilinear term is absent;
    without witnesses there is no coupling.
Coupling
    ``kappa = synth.witness_coupling`` and ``s = LINE_PROMINENCE * ASD(f_line) * sqrt(1 Hz)``.
    A line of amplitude ``kappa * s`` shows in a PSD of resolution ``df`` at
    ``kappa * s / sqrt(2 df)`` over the ASD: ~35 x the noise for kappa = 0.5 and 1 s FFTs.
Injections
    ``g(u) = exp(-u^2 / (2 sigma^2)) sin(phi0 + 2 pi int_0^u f)``, ``sigma = 0.2 s``,
    ``f(u) = f_lo (f_hi / f_lo)^((u + 1 s) / 2 s)`` sweeping up from ``f_lo = 30 Hz`` to
    ``f_hi = min(300 Hz, 0.4 fs)``, evaluated on ``|u| <= 1 s``. Centres ``tau_j`` are spread
    evenly over the span at least 2 s from its ends, with per-interferometer offsets
    ``dt_j(X)`` uniform in [-10, 10] ms. The amplitude ``A`` sets the optimal SNR against the
    design ASD, ``rho^2 = 4 sum_k |G(f_k)|^2 / ASD(f_k)^2 df`` (``G`` the DFT of the sampled
    waveform times ``1/fs``), to ``synth.injection_snr`` in every interferometer.

Besides the frames, the output directory gets ``frames.lcf`` (LAL cache) and ``synth.json``
(the summary returned by ``write_synthetic_dataset``). Stale files of a previous run that
match this dataset's name pattern (``<O>-<X>_<DESC>-*.gwf``) but not its files are removed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import signal

from offline_iaas.atomic import write_text_atomic
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError, DataError

ASD_FILE = "LIGO-T1800044-v5-aLIGO_DESIGN.txt"
BLOCK_SAMPLES = 2**16
"""Samples generated per step (fixed, so the output does not depend on the file length)."""
LINE_PROMINENCE = 100.0
"""``s / ASD(f_line)`` in ``sqrt(Hz)``: the coupled line's scale relative to the noise."""
WITNESS1_CORNER = 2.0
"""Corner frequency (Hz) of the slow witness ``w1``."""
INJECTION_SIGMA = 0.2
"""Width (s) of the injections' Gaussian envelope."""
INJECTION_HALF_LENGTH = 1.0
"""Injections are evaluated on ``|t - t_c| <= INJECTION_HALF_LENGTH`` seconds."""
INJECTION_F_LOW = 30.0
INJECTION_F_HIGH = 300.0
INJECTION_MAX_OFFSET = 0.010
"""Largest per-interferometer time offset (s) of an injection."""
INJECTION_EDGE = 2.0
"""Injections are centred at least this far (s) from the ends of the span."""
CACHE_SUFFIXES = (".lcf", ".cache", ".ffl")


# ---- noise model ----------------------------------------------------------------------------


def asd_path() -> Path:
    """Path of the aLIGO design ASD file shipped in the lalsuite wheel."""
    spec = importlib.util.find_spec("lalapps")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    for d in dirs:
        path = Path(d) / "data" / ASD_FILE
        if path.is_file():
            return path
    raise DataError(f"design ASD {ASD_FILE} not found in the lalapps package ({dirs})")


@lru_cache(maxsize=1)
def _asd_table() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(asd_path())
    return table[:, 0], table[:, 1]


def design_asd(frequencies: np.ndarray) -> np.ndarray:
    """aLIGO design ASD (1/sqrt(Hz)) at ``frequencies`` (Hz), log-log interpolated.

    Values outside the tabulated range are held at the nearest tabulated value.
    """
    freq, asd = _asd_table()
    f = np.clip(np.asarray(frequencies, dtype=float), freq[0], freq[-1])
    return np.exp(np.interp(np.log(f), np.log(freq), np.log(asd)))


def _fir_from_gain(
    gain: Callable[[np.ndarray], np.ndarray], n_taps: int, sample_rate: float
) -> np.ndarray:
    """Linear-phase FIR with magnitude response ~ ``gain(f)`` (frequency sampling, Hann)."""
    freqs = np.fft.rfftfreq(n_taps, 1.0 / sample_rate)
    taps = np.roll(np.fft.irfft(gain(freqs), n=n_taps), n_taps // 2)
    return taps * signal.get_window("hann", n_taps, fftbins=True)


class _FirNoise:
    """Gaussian noise: white noise through an FIR filter, block by block (overlap-save)."""

    def __init__(self, rng: np.random.Generator, taps: np.ndarray, scale: float) -> None:
        self._rng = rng
        self._taps = taps
        self._scale = scale
        self._tail = rng.standard_normal(len(taps) - 1) * scale

    def next(self, n_samples: int) -> np.ndarray:
        """The next ``n_samples`` samples of the stream."""
        white = self._rng.standard_normal(n_samples) * self._scale
        x = np.concatenate([self._tail, white])
        self._tail = x[n_samples:]
        return signal.fftconvolve(x, self._taps, mode="valid")


def _rng(seed: int, key: str) -> np.random.Generator:
    """An independent random stream for ``key`` (a channel name or a role)."""
    return np.random.default_rng([seed % 2**63, zlib.crc32(key.encode())])


# ---- injections -----------------------------------------------------------------------------


def _chirp(u: np.ndarray, f_high: float, phase: float) -> np.ndarray:
    """Unit-amplitude injection waveform at offsets ``u`` (s) from its centre."""
    length = 2.0 * INJECTION_HALF_LENGTH
    ratio = f_high / INJECTION_F_LOW
    log_r = math.log(ratio)
    start = INJECTION_HALF_LENGTH
    cycles = (
        INJECTION_F_LOW
        * length
        / log_r
        * (np.exp(log_r * (u + start) / length) - math.exp(log_r * start / length))
    )
    envelope = np.exp(-0.5 * (u / INJECTION_SIGMA) ** 2)
    out = envelope * np.sin(phase + 2.0 * np.pi * cycles)
    out[np.abs(u) > INJECTION_HALF_LENGTH] = 0.0
    return out


def optimal_snr(waveform: np.ndarray, sample_rate: float) -> float:
    """Optimal SNR of a sampled waveform against the design ASD (one-sided, f > 0)."""
    n_fft = 1 << int(np.ceil(np.log2(max(len(waveform), int(4 * sample_rate)))))
    spectrum = np.fft.rfft(waveform, n=n_fft) / sample_rate
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    df = sample_rate / n_fft
    power = np.abs(spectrum[1:]) ** 2 / design_asd(freqs[1:]) ** 2
    return float(np.sqrt(4.0 * np.sum(power) * df))


def _injection_plan(
    config: CampaignConfig, ifos: list[str], sample_rate: float
) -> list[dict[str, Any]]:
    synth, data = config.synth, config.data
    if synth.injections <= 0:
        return []
    usable = data.duration - 2 * INJECTION_EDGE
    if usable <= 0:
        raise ConfigError(
            f"{config.source}: 'synth.injections' needs data.duration > {2 * INJECTION_EDGE} s "
            f"(injections stay {INJECTION_EDGE} s from the ends), got {data.duration}"
        )
    f_high = min(INJECTION_F_HIGH, 0.4 * sample_rate)
    if f_high <= INJECTION_F_LOW:
        raise ConfigError(
            f"{config.source}: 'synth.frame_sample_rate' ({sample_rate} Hz) is too low for "
            f"injections sweeping up from {INJECTION_F_LOW} Hz"
        )
    rng = _rng(synth.seed, "injections")
    u = np.arange(-INJECTION_HALF_LENGTH, INJECTION_HALF_LENGTH, 1.0 / sample_rate)
    plan = []
    for j in range(synth.injections):
        centre = INJECTION_EDGE + usable * (j + 0.5) / synth.injections
        phase = float(rng.uniform(0.0, 2.0 * np.pi))
        offsets = {ifo: float(rng.uniform(-1.0, 1.0)) * INJECTION_MAX_OFFSET for ifo in ifos}
        unit_snr = optimal_snr(_chirp(u, f_high, phase), sample_rate)
        snr = synth.injection_snr
        if synth.injection_snr_max > snr and synth.injections > 1:
            snr += (synth.injection_snr_max - snr) * j / (synth.injections - 1)
        amplitude = snr / unit_snr
        per_ifo = {}
        for ifo in ifos:
            shifted = amplitude * _chirp(u - offsets[ifo], f_high, phase)
            per_ifo[ifo] = {
                "gps_time": data.start + centre + offsets[ifo],
                "time_offset": offsets[ifo],
                "snr": optimal_snr(shifted, sample_rate),
            }
        plan.append(
            {
                "gps_time": data.start + centre,
                "seconds_from_start": centre,
                "amplitude": amplitude,
                "phase": phase,
                "f_low": INJECTION_F_LOW,
                "f_high": f_high,
                "sigma": INJECTION_SIGMA,
                "ifos": per_ifo,
            }
        )
    return plan


# ---- per-interferometer stream --------------------------------------------------------------


def _witness_name(ifo: str, index: int) -> str:
    return f"{ifo}:PEM-SYNTH_WITNESS_{index}"


def _witness0_params(seed: int, ifo: str) -> dict[str, float]:
    rng = _rng(seed, f"{ifo}:witness-0-params")
    return {
        "phase": float(rng.uniform(0, 2 * np.pi)),
        "period_1": float(rng.uniform(30.0, 90.0)),
        "phase_1": float(rng.uniform(0, 2 * np.pi)),
        "period_2": float(rng.uniform(7.0, 20.0)),
        "phase_2": float(rng.uniform(0, 2 * np.pi)),
    }


def _ifo_blocks(
    config: CampaignConfig,
    ifo: str,
    strain_channels: list[str],
    sample_rate: float,
    line_scale: float,
    injections: list[dict[str, Any]],
) -> Iterator[np.ndarray]:
    """Endless blocks ``[len(strain) + witnesses, BLOCK_SAMPLES]`` for one interferometer."""
    synth = config.synth
    n_w = synth.witnesses
    noise_taps = _fir_from_gain(design_asd, int(round(2 * sample_rate)), sample_rate)
    noises = [
        _FirNoise(_rng(synth.seed, ch), noise_taps, math.sqrt(sample_rate / 2))
        for ch in strain_channels
    ]
    slow = None
    if n_w >= 2:
        slow_taps = _fir_from_gain(
            lambda f: 1.0 / (1.0 + (f / WITNESS1_CORNER) ** 4),
            int(round(2 * sample_rate)),
            sample_rate,
        )
        slow_taps /= np.sqrt(np.sum(slow_taps**2))
        slow = _FirNoise(_rng(synth.seed, _witness_name(ifo, 1)), slow_taps, 1.0)
    white = [_rng(synth.seed, _witness_name(ifo, i)) for i in range(2, n_w)]
    p = _witness0_params(synth.seed, ifo)
    kappa = synth.witness_coupling
    f_line = synth.line_frequency
    f_high = injections[0]["f_high"] if injections else 0.0
    offset = 0
    while True:
        tau = (offset + np.arange(BLOCK_SAMPLES)) / sample_rate
        witnesses = []
        if n_w >= 1:
            amp = (
                1.0
                + 0.3 * np.sin(2 * np.pi * tau / p["period_1"] + p["phase_1"])
                + 0.2 * np.sin(2 * np.pi * tau / p["period_2"] + p["phase_2"])
            )
            witnesses.append(amp * np.sin(2 * np.pi * f_line * tau + p["phase"]))
        if slow is not None:
            witnesses.append(slow.next(BLOCK_SAMPLES))
        witnesses += [g.standard_normal(BLOCK_SAMPLES) for g in white]
        coupled = np.zeros(BLOCK_SAMPLES)
        if n_w >= 2:
            coupled = kappa * line_scale * (witnesses[0] + witnesses[0] * witnesses[1])
        elif n_w == 1:
            coupled = kappa * line_scale * witnesses[0]
        signal_sum = np.zeros(BLOCK_SAMPLES)
        for inj in injections:
            centre = inj["seconds_from_start"] + inj["ifos"][ifo]["time_offset"]
            lo = int(np.floor((centre - INJECTION_HALF_LENGTH) * sample_rate)) - offset
            hi = int(np.ceil((centre + INJECTION_HALF_LENGTH) * sample_rate)) + 1 - offset
            lo, hi = max(lo, 0), min(hi, BLOCK_SAMPLES)
            if lo < hi:
                u = tau[lo:hi] - centre
                signal_sum[lo:hi] += inj["amplitude"] * _chirp(u, f_high, inj["phase"])
        # the noise's amplitude drifts linearly over the span (synth.noise_drift)
        level = 1.0 + (synth.noise_drift - 1.0) * tau / config.data.duration
        strains = [level * nz.next(BLOCK_SAMPLES) + coupled + signal_sum for nz in noises]
        yield np.array(strains + witnesses)
        offset += BLOCK_SAMPLES


# ---- output ---------------------------------------------------------------------------------


def default_out_dir(config: CampaignConfig) -> Path:
    """``data.frames``, or its parent directory when it names a cache file."""
    if config.data.frames is None:
        raise ConfigError(
            f"{config.source}: 'data.frames' is not set (frames come from a datafind server); "
            "give the output directory explicitly"
        )
    frames = Path(config.data.frames)
    return frames.parent if frames.suffix in CACHE_SUFFIXES else frames


def _write_gwf(
    path: Path,
    names: list[str],
    data: list[np.ndarray],
    gps_start: int,
    sample_rates: list[float],
    desc: str,
) -> None:
    from gwpy.timeseries import TimeSeries, TimeSeriesDict

    tsd = TimeSeriesDict()
    for name, values, rate in zip(names, data, sample_rates, strict=True):
        tsd[name] = TimeSeries(values, t0=gps_start, sample_rate=rate, name=name, channel=name)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tsd.write(str(tmp), format="gwf", name=desc)
        os.replace(tmp, path)
    except Exception as err:
        tmp.unlink(missing_ok=True)
        raise DataError(f"cannot write frame file {path}: {err}") from err


def _integer(value: float, key: str, config: CampaignConfig) -> int:
    if abs(value - round(value)) > 1e-9:
        raise ConfigError(f"{config.source}: '{key}' must be a whole number for synth, got {value}")
    return int(round(value))


def write_synthetic_dataset(config: CampaignConfig, out_dir: Path | None = None) -> dict:
    """Write the synthetic GWF dataset, its LAL cache and ``synth.json``.

    Parameters
    ----------
    config
        The campaign; ``data`` gives the span and strain channels, ``synth`` the rest.
    out_dir
        Output directory (created); default ``data.frames`` (its parent if a cache file).

    Returns
    -------
    dict
        The summary also written to ``<out_dir>/synth.json``.
    """
    synth, data = config.synth, config.data
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(config)
    out_dir = out_dir.resolve()
    sample_rate = synth.frame_sample_rate
    if sample_rate <= 0:
        raise ConfigError(f"{config.source}: 'synth.frame_sample_rate' must be positive")
    if synth.witnesses < 0:
        raise ConfigError(f"{config.source}: 'synth.witnesses' must not be negative")
    witness_rate = synth.witness_sample_rate or sample_rate
    witness_step = _integer(
        sample_rate / witness_rate if witness_rate > 0 else -1.0,
        "synth.frame_sample_rate / synth.witness_sample_rate",
        config,
    )
    if witness_rate <= 0 or witness_step < 1:
        raise ConfigError(
            f"{config.source}: 'synth.witness_sample_rate' ({synth.witness_sample_rate} Hz) "
            f"must divide 'synth.frame_sample_rate' ({sample_rate} Hz) a whole number of times"
        )
    gps_start = _integer(data.start, "data.start", config)
    file_duration = _integer(synth.file_duration, "synth.file_duration", config)
    file_samples = _integer(
        file_duration * sample_rate, "synth.file_duration * synth.frame_sample_rate", config
    )
    _integer(
        file_duration * witness_rate, "synth.file_duration * synth.witness_sample_rate", config
    )
    n_files = max(1, math.ceil(data.duration / file_duration - 1e-9))
    if not re.fullmatch(r"[A-Za-z0-9_]+", synth.description):
        raise ConfigError(
            f"{config.source}: 'synth.description' must be letters, digits and _, "
            f"got {synth.description!r}"
        )

    ifos: list[str] = []
    for ch in data.channels:
        ifo = ch.split(":", 1)[0]
        if ifo not in ifos:
            ifos.append(ifo)
    line_scale = LINE_PROMINENCE * float(design_asd(np.array([synth.line_frequency]))[0])
    injections = _injection_plan(config, ifos, sample_rate)
    out_dir.mkdir(parents=True, exist_ok=True)

    files: list[dict[str, Any]] = []
    strain_channels: list[str] = []
    witness_channels: list[str] = []
    for ifo in ifos:
        strains = [ch for ch in data.channels if ch.split(":", 1)[0] == ifo]
        witnesses = [_witness_name(ifo, i) for i in range(synth.witnesses)]
        strain_channels += strains
        witness_channels += witnesses
        names = strains + witnesses
        obs = ifo[0]
        blocks = _ifo_blocks(config, ifo, strains, sample_rate, line_scale, injections)
        pending = np.empty((len(names), 0))
        for index in range(n_files):
            while pending.shape[1] < file_samples:
                pending = np.concatenate([pending, next(blocks)], axis=1)
            file_start = gps_start + index * file_duration
            path = out_dir / f"{obs}-{ifo}_{synth.description}-{file_start}-{file_duration}.gwf"
            block = pending[:, :file_samples]
            n_strain = len(strains)
            _write_gwf(
                path,
                names,
                [block[i] for i in range(n_strain)]
                + [block[i, ::witness_step] for i in range(n_strain, len(names))],
                file_start,
                [sample_rate] * n_strain + [witness_rate] * (len(names) - n_strain),
                synth.description,
            )
            pending = pending[:, file_samples:]
            files.append(
                {
                    "path": str(path),
                    "observatory": obs,
                    "ifo": ifo,
                    "description": f"{ifo}_{synth.description}",
                    "gps_start": file_start,
                    "duration": file_duration,
                }
            )
    files.sort(key=lambda f: (f["gps_start"], f["observatory"], f["ifo"]))
    _remove_stale(out_dir, ifos, synth.description, {f["path"] for f in files})

    cache_path = out_dir / "frames.lcf"
    write_text_atomic(cache_path, _lal_cache(files))
    caches = [str(cache_path)]
    named = Path(config.data.frames) if config.data.frames is not None else out_dir
    if (
        config.data.frames is not None
        and out_dir == default_out_dir(config).resolve()
        and named.suffix in CACHE_SUFFIXES
    ):
        named = named.resolve()
        if named != cache_path:
            text = _ffl(files) if named.suffix == ".ffl" else _lal_cache(files)
            write_text_atomic(named, text)
            caches.append(str(named))

    formula = ("strain = noise" if synth.noise_drift == 1.0 else
               f"strain = (1 + {synth.noise_drift - 1:g} t / duration) noise")
    if synth.witnesses >= 1:
        formula += (
            " + witness_coupling * line_scale * (w0 + w0 * w1)"
            if synth.witnesses >= 2
            else " + witness_coupling * line_scale * w0"
        )
    if injections:
        formula += " + sum_j amplitude_j * g(t - t_j(ifo))"
    summary: dict[str, Any] = {
        "directory": str(out_dir),
        "description": synth.description,
        "seed": synth.seed,
        "sample_rate": sample_rate,
        "witness_sample_rate": witness_rate,
        "file_duration": file_duration,
        "gps_start": gps_start,
        "gps_end": gps_start + n_files * file_duration,
        "requested_duration": data.duration,
        "ifos": ifos,
        "files": files,
        "caches": caches,
        "channels": strain_channels + witness_channels,
        "strain_channels": strain_channels,
        "witness_channels": witness_channels,
        "noise": {
            "asd_file": str(asd_path()),
            "fir_taps": int(round(2 * sample_rate)),
            "white_variance": sample_rate / 2,
            "block_samples": BLOCK_SAMPLES,
        },
        "coupling": {
            "formula": formula,
            "witness_coupling": synth.witness_coupling,
            "line_scale": line_scale,
            "line_prominence": LINE_PROMINENCE,
            "line_frequency": synth.line_frequency,
            "w0": "a(tau) * sin(2 pi line_frequency tau + phase), tau = t - gps_start, "
            "a = 1 + 0.3 sin(2 pi tau / period_1 + phase_1) + 0.2 sin(2 pi tau / period_2 "
            "+ phase_2)",
            "w0_params": {ifo: _witness0_params(synth.seed, ifo) for ifo in ifos},
            "w1": f"Gaussian noise, unit variance, gain 1 / (1 + (f / {WITNESS1_CORNER} Hz)^4)",
            "others": "unit white Gaussian noise, not coupled",
        },
        "injection_waveform": (
            "g(u) = exp(-u^2 / (2 sigma^2)) sin(phase + 2 pi int_0^u f), "
            "f(u) = f_low (f_high / f_low)^((u + 1) / 2), |u| <= 1 s; "
            "snr = sqrt(4 sum |G(f)|^2 / ASD(f)^2 df) against the design ASD"
        ),
        "injections": injections,
    }
    write_text_atomic(out_dir / "synth.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _lal_cache(files: list[dict[str, Any]]) -> str:
    return "".join(
        f"{f['observatory']} {f['description']} {f['gps_start']} {f['duration']} "
        f"file://localhost{f['path']}\n"
        for f in files
    )


def _ffl(files: list[dict[str, Any]]) -> str:
    return "".join(f"{f['path']} {f['gps_start']} {f['duration']} 0 0\n" for f in files)


def _remove_stale(out_dir: Path, ifos: list[str], desc: str, keep: set[str]) -> None:
    for ifo in ifos:
        name = re.escape(f"{ifo[0]}-{ifo}_{desc}-")
        pattern = re.compile(rf"{name}\d+-\d+\.gwf")
        for path in out_dir.glob(f"{ifo[0]}-{ifo}_{desc}-*.gwf"):
            if pattern.fullmatch(path.name) and str(path) not in keep:
                path.unlink()
