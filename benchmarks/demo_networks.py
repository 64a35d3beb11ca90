"""Train the demo networks and check their physics on held-out synthetic data.

Writes the demo dataset (``configs/demo.toml``, 2048 s at 1024 Hz, two detectors) under a work
directory, runs ``train_demo`` (DeepClean per detector and BBHnet, 2 torch threads), then:

* DeepClean: cleaned/raw ASD ratio (gwpy median ASD) at 60 Hz and outside 55-65 Hz over a
  held-out stretch, predictions of windows one stride apart averaged where they overlap;
* BBHnet: the largest statistic over an injection-free held-out stretch, and found/missed
  fresh injections at network SNR 8-30 in another stretch of the same length.

Usage: .venv/bin/python benchmarks/demo_networks.py [--work DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from importlib import resources
from pathlib import Path

import torch

from offline_iaas.config import load_config
from offline_iaas.data.frames import discover_frames
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.models.evaluation import evaluate_bbhnet, evaluate_deepclean
from offline_iaas.models.training import train_demo
from offline_iaas.models.weights import load_network

SNRS = (8.0, 10.0, 12.0, 15.0, 20.0, 30.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="demo-networks-"))
    work.mkdir(parents=True, exist_ok=True)
    source = resources.files("offline_iaas.configs").joinpath("demo.toml")
    (work / "demo.toml").write_text(source.read_text())
    config = load_config(work / "demo.toml")
    started = time.monotonic()
    if not (work / "demo-data" / "frames" / "synth.json").exists():
        write_synthetic_dataset(config)
    synth_seconds = time.monotonic() - started

    started = time.monotonic()
    paths = train_demo(config, work / "weights")
    train_seconds = time.monotonic() - started
    summary = json.loads(paths["summary"].read_text())
    frames = discover_frames(config)
    t0 = config.data.start
    results: dict = {
        "machine": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "synth_seconds": synth_seconds,
        "train_demo_seconds": train_seconds,
        "deepclean": {},
    }
    kernel = config.kernel_samples
    for name, report in summary["networks"].items():
        if report["kind"] != "deepclean":
            continue
        model = load_network("deepclean", paths[name],
                             {"witnesses": len(report["witness_channels"]),
                              "kernel_samples": kernel})
        # held out: after DeepClean's training data (the first 256 s)
        results["deepclean"][name] = {
            "train_seconds": report["train_seconds"],
            "final_loss": report["loss"][-1],
            "held_out": [t0 + 512, t0 + 1024],
            "asd": evaluate_deepclean(model, config, frames, report["ifo"], t0 + 512, t0 + 1024),
        }
    report = summary["networks"]["bbhnet"]
    model = load_network("bbhnet", paths["bbhnet"],
                         {"ifos": len(report["channels"]), "kernel_samples": kernel,
                          "width": report["width"], "depth": report["depth"]})
    # 500 s each after BBHnet's training data (the first 768 s), both free of the dataset's
    # injections (257.5, 768.5, 1279.5, 1790.5 s)
    bbh = evaluate_bbhnet(model, config, frames, (t0 + 1285, t0 + 1785), (t0 + 775, t0 + 1275),
                          SNRS)
    found: dict[str, list[int]] = {}
    for row in bbh["injections"]:
        entry = found.setdefault(f"{row['network_snr']:g}", [0, 0])
        entry[0 if row["found"] else 1] += 1
    results["bbhnet"] = {
        "train_seconds": report["train_seconds"],
        "final_loss": report["loss"][-1],
        "final_accuracy": report["accuracy"][-1],
        "background_max": bbh["background_max"],
        "background_p99": bbh["background_p99"],
        "background_windows": bbh["background_windows"],
        "found_missed_by_snr": found,
        "min_found_statistic_snr12plus": min(
            r["statistic"] for r in bbh["injections"] if r["network_snr"] >= 12
        ),
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.work is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
