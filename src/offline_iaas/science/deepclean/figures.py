"""DeepClean's figures in the report: the raw and cleaned ASDs and their ratio."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.scale import LogScale

from offline_iaas.report.plots import WIDTH, default_style, png_bytes, subplots
from offline_iaas.report.spectra import StrainSpectra

ASD_FMIN_HZ = 5.0
"""Lowest frequency shown in the ASD plots."""


@default_style
def asd_figure(ifo: str, spectra: StrainSpectra, band: tuple[float, float]) -> bytes:
    """ASD of raw and cleaned strain (log-log) and their ratio, the coupling band shaded."""
    fig = Figure(figsize=(WIDTH, 6.5), layout="constrained")
    top, bottom = subplots(fig, 2, 1, sharex=True, height_ratios=(2, 1))
    keep = spectra.frequencies > 0
    f = spectra.frequencies[keep]
    # matplotlib's own log scale (gwpy registers another under the name "log")
    top.set_xscale(LogScale(top.xaxis))
    top.set_yscale(LogScale(top.yaxis))
    if spectra.raw is not None:
        top.plot(f, np.sqrt(spectra.raw[keep]), color="tab:gray", lw=1, label="raw")
    top.plot(f, np.sqrt(spectra.clean[keep]), color="tab:blue", lw=1, label="cleaned")
    for ax in (top, bottom):
        ax.axvspan(*band, color="tab:orange", alpha=0.2, lw=0)
        ax.grid(True, which="both", alpha=0.3)
    top.set_ylabel(r"ASD [strain/$\sqrt{\mathrm{Hz}}$]")
    top.set_title(f"{ifo}: {spectra.seconds:.0f} s of data; coupling band "
                  f"{band[0]:g}-{band[1]:g} Hz shaded")
    top.legend(loc="upper right")
    if spectra.raw is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.sqrt(spectra.clean[keep] / spectra.raw[keep])
        bottom.plot(f, ratio, color="tab:blue", lw=1)
    bottom.axhline(1.0, color="black", lw=0.8)
    bottom.set_ylabel("cleaned / raw")
    bottom.set_xlabel("Frequency [Hz]")
    bottom.set_xlim(max(f[0], ASD_FMIN_HZ), f[-1])
    return png_bytes(fig)
