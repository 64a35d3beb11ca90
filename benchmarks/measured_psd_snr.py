"""Is the measured-PSD SNR unbiased on stationary design-PSD noise?

For each of ``--injections`` binaries of the packaged demo's population (at its SNR cut's
population, no cut), draws ``--noise-seconds`` of stationary Gaussian noise of the aLIGO design
PSD per detector (white noise coloured in the frequency domain; below 10 Hz the PSD is held at
its 10 Hz value so Hann leakage from the seismic wall does not enter the band), and computes
each detector's optimal SNR of the projected waveform against

- the design PSD itself (the truth),
- ``waveforms.welch_asd(..., inverse_unbiased=True)`` of the middle ``MEASURED_PSD_SECONDS`` of
  the noise (what ``synth`` records as ``snr``), and the same without the correction,
- an independent estimate: ``scipy.signal.welch`` mean-averaged over the whole noise span,
  linearly interpolated (its ``E[S/S^]`` is about ``K/(K-1)``, 1.002 at 1024 s).

Prints the mean network-SNR ratio to the design SNR of each, with its standard error.
The figure in docs/user-guide.md comes from this script.

Usage: .venv/bin/python benchmarks/measured_psd_snr.py [--injections N] [--seed S]
"""

from __future__ import annotations

import argparse
import dataclasses
from importlib import resources
from pathlib import Path

import numpy as np
from scipy import signal

from offline_iaas.bench.provenance import source_commit
from offline_iaas.config import load_config
from offline_iaas.data.synth import design_asd
from offline_iaas.search.draw_injections import MEASURED_PSD_SECONDS
from offline_iaas.search.population import draw_binaries, population_spec
from offline_iaas.search.waveforms import (
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
    welch_asd,
)

IFOS = ("H1", "L1")


def coloured_noise(rng: np.random.Generator, seconds: float, fs: float) -> np.ndarray:
    """Stationary Gaussian noise of one-sided PSD ``design_asd^2`` (10 Hz floor below)."""
    n = int(seconds * fs)
    freqs = np.fft.rfftfreq(n, 1 / fs)
    psd = design_asd(np.maximum(freqs, 10.0)) ** 2
    spectrum = np.fft.rfft(rng.standard_normal(n)) * np.sqrt(psd * fs / 2)
    spectrum[0] = 0.0
    return np.fft.irfft(spectrum, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--injections", type=int, default=120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--noise-seconds", type=float, default=1024.0)
    parser.add_argument("--sample-rate", type=float, default=1024.0)
    args = parser.parse_args()
    config = load_config(Path(str(resources.files("offline_iaas.campaigns") / "demo.toml")), [])
    spec = population_spec(config.synth, "demo.toml")
    rng = np.random.default_rng(args.seed)
    fs, seconds = args.sample_rate, args.noise_seconds
    centre = seconds / 2
    lo = int((centre - MEASURED_PSD_SECONDS / 2) * fs)
    hi = lo + int(MEASURED_PSD_SECONDS * fs)
    ratios: dict[str, list[float]] = {"measured": [], "uncorrected": [], "scipy_mean": []}
    for binary in draw_binaries(spec, args.injections, rng, gps_time=1e9 + centre):
        binary = dataclasses.replace(binary, luminosity_distance=min(
            binary.luminosity_distance, 2000.0))  # loud enough that no SNR rounds to 0
        wave = polarizations(binary, spec.approximant, fs, spec.f_lower_hz)
        snrs: dict[str, list[float]] = {k: [] for k in ("design", *ratios)}
        for ifo in IFOS:
            strain = detector_strain(binary, wave, ifo, 1e9)[1]
            noise = coloured_noise(rng, seconds, fs)
            freqs, psd = signal.welch(noise, fs=fs, nperseg=int(4 * fs), average="mean")
            snrs["design"].append(optimal_snr(strain, fs, design_asd, spec.f_lower_hz))
            for name, asd in (
                ("measured", welch_asd(noise[lo:hi], fs, inverse_unbiased=True)),
                ("uncorrected", welch_asd(noise[lo:hi], fs)),
                ("scipy_mean", lambda f, p=psd, q=freqs: np.sqrt(np.interp(f, q, p))),
            ):
                snrs[name].append(optimal_snr(strain, fs, asd, spec.f_lower_hz))
        design = network_snr(snrs["design"])
        for name in ratios:
            ratios[name].append(network_snr(snrs[name]) / design)
    print(f"# {args.injections} injections of the demo population, {len(IFOS)} detectors, "
          f"stationary design-PSD noise at {fs:g} Hz, seed {args.seed}, "
          f"commit `{source_commit()}`")
    for name, values in ratios.items():
        v = np.array(values)
        print(f"{name:12s} / design network SNR: mean {v.mean():.4f} "
              f"+- {v.std(ddof=1) / np.sqrt(len(v)):.4f}, min {v.min():.4f}, "
              f"max {v.max():.4f}")
    measured = np.array(ratios["measured"]) / np.array(ratios["scipy_mean"])
    print(f"measured / scipy mean Welch ({seconds:g} s): mean {measured.mean():.4f}")


if __name__ == "__main__":
    main()
