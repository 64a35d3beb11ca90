"""Spectra of the cleaned strain: raw and cleaned ASDs, and the BNS inspiral range.

The campaign file holds, per interferometer, the cleaned strain (``clean/<IFO>/<GPS>``) and the
predicted noise that was subtracted (``noise/<IFO>/<GPS>``), so the raw strain is their sum and
no frames are read. At most ``max_seconds`` of data are used per interferometer, read a block
at a time, so memory does not grow with the campaign.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from scipy.signal import welch

BLOCK_SECONDS = 256.0
"""Data read and transformed at a time."""
RANGE_FMIN_HZ = 10.0
"""Lower frequency of the inspiral range integral."""


@dataclass(frozen=True)
class StrainSpectra:
    """Welch-averaged one-sided PSDs (strain²/Hz) of one interferometer."""

    frequencies: np.ndarray
    clean: np.ndarray
    raw: np.ndarray | None
    """None when the file holds no subtracted noise for the interferometer."""
    seconds: float
    """Data seconds averaged."""


def ifos_with_clean_strain(path: Path) -> list[str]:
    """Interferometers with a ``clean/<IFO>`` group in the campaign file."""
    with h5py.File(path, "r") as f:
        group = f.get("clean")
        return sorted(group) if isinstance(group, h5py.Group) else []


def strain_spectra(
    path: Path, ifo: str, fftlength: float, max_seconds: float = 2048.0,
    gps_range: tuple[float, float] | None = None,
) -> StrainSpectra | None:
    """PSDs of the cleaned and raw (cleaned + noise) strain of one interferometer.

    Parameters
    ----------
    path
        The campaign file.
    ifo
        Interferometer prefix (``H1``).
    fftlength
        FFT length in seconds (Hann window, half overlap, mean average).
    max_seconds
        At most this much data is read, from the first stretches on.
    gps_range
        Only data within this GPS range (the merge's held-out data); default all.

    Returns
    -------
    The spectra, or None when no stretch is at least ``fftlength`` long.
    """
    sums: dict[str, np.ndarray] = {}
    weight, used, frequencies = 0, 0.0, None
    with h5py.File(path, "r") as f:
        clean = f[f"clean/{ifo}"]
        noise = f.get(f"noise/{ifo}")
        have_noise = isinstance(noise, h5py.Group) and set(clean) <= set(noise)
        for name in sorted(clean, key=float):
            if used >= max_seconds:
                break
            data = clean[name]
            rate = 1.0 / float(data.attrs["dx"])
            nperseg = int(round(fftlength * rate))
            first, stop = 0, len(data)
            if gps_range is not None:
                x0 = float(data.attrs["x0"])
                first = min(stop, max(0, int(np.ceil((gps_range[0] - x0) * rate - 1e-6))))
                stop = max(first, min(stop, int(np.floor((gps_range[1] - x0) * rate + 1e-6))))
            count = min(stop - first, int((max_seconds - used) * rate))
            if nperseg < 2 or count < nperseg:
                continue
            block = max(nperseg, int(BLOCK_SECONDS * rate) // nperseg * nperseg)
            for a in range(first, first + count, block):
                b = min(a + block, first + count)
                if b - a < nperseg:
                    break
                series = {"clean": np.asarray(data[a:b], dtype=np.float64)}
                if have_noise:
                    series["raw"] = series["clean"] + np.asarray(noise[name][a:b], np.float64)
                segments = 1 + (b - a - nperseg) // (nperseg - nperseg // 2)  # welch's count
                for key, values in series.items():
                    frequencies, psd = welch(values, fs=rate, nperseg=nperseg, window="hann")
                    sums[key] = sums.get(key, 0.0) + psd * segments
                weight += segments
                used += (b - a) / rate
    if weight == 0 or frequencies is None:
        return None
    raw = sums["raw"] / weight if "raw" in sums else None
    return StrainSpectra(frequencies, sums["clean"] / weight, raw, used)


def inspiral_range(frequencies: np.ndarray, psd: np.ndarray, fmin: float = RANGE_FMIN_HZ) -> float:
    """BNS (1.4 + 1.4 M☉) inspiral range in Mpc, SNR 8, from a strain PSD (1/Hz)."""
    from gwpy.astro import sensemon_range
    from gwpy.frequencyseries import FrequencySeries

    keep = frequencies > 0
    series = FrequencySeries(psd[keep], frequencies=frequencies[keep], unit="1/Hz")
    return float(sensemon_range(series, fmin=fmin).to("Mpc").value)
