"""Spectra of a strain and its cleaned version (``StrainSpectra``, as DeepClean's products
read them from the campaign file: ``science/deepclean/products.strain_spectra``), and the BNS
inspiral range of a PSD.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def inspiral_range(frequencies: np.ndarray, psd: np.ndarray, fmin: float = RANGE_FMIN_HZ) -> float:
    """BNS (1.4 + 1.4 M☉) inspiral range in Mpc, SNR 8, from a strain PSD (1/Hz)."""
    from gwpy.astro import sensemon_range
    from gwpy.frequencyseries import FrequencySeries

    keep = frequencies > 0
    series = FrequencySeries(psd[keep], frequencies=frequencies[keep], unit="1/Hz")
    return float(sensemon_range(series, fmin=fmin).to("Mpc").value)
