"""The demo networks' physics check in-process (the slow test and
``benchmarks/demo_networks.py``): ``train_demo``'s DeepClean of each detector
(``science/deepclean/evaluation.py``) and BBHnet (``science/bbhnet/evaluation.py``) on
stretches of the demo dataset they were not trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile
from offline_iaas.science.bbhnet.evaluation import evaluate_bbhnet
from offline_iaas.science.deepclean.evaluation import clean_stretch, evaluate_deepclean

PHYSICS_DATASET: tuple[str, ...] = ("synth.injections=4",)
"""Overrides of the packaged demo config for the physics check: four injections (coalescing
at GPS start + 259.8, 770.4, 1281.0, 1791.5 s, each waveform at most 5 s long), away from
the held-out stretches below."""
DEEPCLEAN_HELD_OUT: tuple[float, float] = (512.0, 1024.0)
"""DeepClean's held-out stretch (s after ``data.start``; it trains on the first 256 s)."""
BBHNET_BACKGROUND: tuple[float, float] = (1285.0, 1785.0)
BBHNET_FOREGROUND: tuple[float, float] = (775.0, 1275.0)
"""BBHnet's held-out stretches (s after ``data.start``; it trains on the first 768 s)."""
PHYSICS_SNRS: tuple[float, ...] = (8.0, 10.0, 12.0, 15.0, 20.0, 30.0)


def evaluate_demo_networks(
    config: CampaignConfig, frames: Sequence[FrameFile], paths: dict, summary: dict
) -> dict[str, Any]:
    """DeepClean (per detector) and BBHnet of ``train_demo`` on the held-out stretches.

    ``paths`` and ``summary`` are what ``train_demo`` returned and wrote. DeepClean rows for
    FFT lengths 1, 2, 4 s and guards 0, 2 Hz; BBHnet at ``PHYSICS_SNRS``.
    """
    from offline_iaas.models.weights import load_network

    t0, kernel = config.data.start, config.kernel_samples
    out: dict[str, Any] = {"deepclean": {}}
    for name, report in summary["networks"].items():
        if "witness_channels" not in report:  # DeepClean's rows: one per detector
            continue
        model = load_network("deepclean", paths[name], {
            "witnesses": len(report["witness_channels"]), "kernel_samples": kernel})
        start, end = (t0 + s for s in DEEPCLEAN_HELD_OUT)
        raw, cleaned = clean_stretch(model, config, frames, report["ifo"], start, end)
        out["deepclean"][report["ifo"]] = evaluate_deepclean(
            raw, cleaned, config.data.sample_rate, config.synth.line_frequency,
            tuple(report["band_hz"]), fftlengths=(1.0, 2.0, 4.0), guards_hz=(0.0, 2.0))
    report = summary["networks"]["bbhnet"]
    model = load_network("bbhnet", paths["bbhnet"], {
        "ifos": len(report["channels"]), "kernel_samples": kernel, "width": report["width"],
        "depth": report["depth"]})
    out["bbhnet"] = evaluate_bbhnet(
        model, config, frames, tuple(t0 + s for s in BBHNET_BACKGROUND),
        tuple(t0 + s for s in BBHNET_FOREGROUND), PHYSICS_SNRS,
    )
    return out
