"""Train the demo networks over several seeds and thread counts; print the physics' spread.

Writes the physics check's dataset (the packaged demo config with
``science.e2e.evaluation.PHYSICS_DATASET``: 2048 s at 1024 Hz, two detectors, four injections)
under a work directory, then for every seed and torch thread count runs ``train_demo`` and
``evaluate_demo_networks`` (the slow test's check, on held-out data; both in a pinned child):

* DeepClean: cleaned/raw ASD ratio (gwpy median ASD) at 60 Hz and outside 55-65 Hz over a
  held-out stretch, with and without the 2 Hz guard;
* BBHnet: the largest statistic over an injection-free held-out stretch, and found/missed
  fresh injections at network SNR 8-30 in another stretch of the same length.

Training runs under the pinned numerics (``models/numerics.py``), so a seed and a thread
count give the same networks on every x86-64 CPU with AVX2: the spread over seeds is the
training's own, and a test's margin over it holds on every such machine. Each row records
the numerics it ran with (``--native`` trains with this CPU's own code paths instead, which
another CPU does not reproduce). The table printed at the end is the one in docs/networks.md.

Usage: .venv/bin/python benchmarks/demo_networks.py [--seeds 0 1 2 3 4] [--threads 1 2]
       [--work DIR] [--out FILE.json] [--native]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from importlib import resources
from pathlib import Path

from offline_iaas.bench.provenance import source_commit
from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.models.numerics import cpu_model, run_in_child
from offline_iaas.models.training import train_demo
from offline_iaas.science.e2e.evaluation import PHYSICS_DATASET, evaluate_demo_networks

EVALUATE = f"{evaluate_demo_networks.__module__}:{evaluate_demo_networks.__name__}"


def summarise(run: dict) -> dict:
    """The numbers the physics test asserts on (and the unguarded ones it does not)."""
    rows = [row for ifo_rows in run["deepclean"].values() for row in ifo_rows]
    guarded = [row for row in rows if row["guard_hz"] >= 2.0]
    bbh = run["bbhnet"]
    loud = [r for r in bbh["injections"] if r["network_snr"] >= 12]
    return {
        "worst_ratio_at_line": max(r["ratio_at_line"] for r in rows),
        "worst_deviation_outside_band_2hz_guard": max(
            r["max_deviation_outside_band"] for r in guarded),
        "worst_ratio_outside_band_no_guard": max(r["max_ratio_outside_band"] for r in rows),
        "bbhnet_background_max": bbh["background_max"],
        "bbhnet_loud_found": f"{sum(r['found'] for r in loud)}/{len(loud)}",
        "bbhnet_min_loud_statistic": min(r["statistic"] for r in loud),
        "bbhnet_snr8_found": sum(r["found"] for r in bbh["injections"]
                                 if r["network_snr"] == 8.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--native", action="store_true",
                        help="train with this CPU's own code paths, not the pinned numerics")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="demo-networks-"))
    work.mkdir(parents=True, exist_ok=True)
    source = resources.files("offline_iaas.campaigns").joinpath("demo.toml")
    (work / "demo.toml").write_text(source.read_text())
    config = load_config(work / "demo.toml", list(PHYSICS_DATASET))
    if not (work / "demo-data" / "frames" / "synth.json").exists():
        write_synthetic_dataset(config)
    frames = discover_frames(config)
    results: dict = {"cpu": cpu_model(), "commit": source_commit(), "runs": []}
    for threads in args.threads:
        for seed in args.seeds:
            started = time.monotonic()
            weights = work / f"weights-{seed}-{threads}"
            paths = train_demo(config, weights, seed=seed, threads=threads,
                               pinned=not args.native)
            summary = json.loads(paths["summary"].read_text())
            results.setdefault("numerics", summary["numerics"])
            # held out under the pin too: the same bits on every x86-64-v3 CPU
            run = run_in_child(EVALUATE, {"config": config, "frames": frames, "paths": paths,
                                          "summary": summary}, pinned=not args.native)
            row = {"seed": seed, "threads": threads,
                   "seconds": round(time.monotonic() - started, 1), **summarise(run)}
            results["runs"].append({**row, "detail": run})
            print(json.dumps(row), flush=True)
            shutil.rmtree(weights)
    keys = [k for k in results["runs"][0] if k not in ("seed", "threads", "seconds", "detail")]
    numerics = results["numerics"]
    print(f"\nspread over {len(results['runs'])} runs on {results['cpu']} at commit "
          f"{results['commit']} (numerics: pin {numerics['pin']}, torch "
          f"{numerics['aten_capability']} kernels, oneDNN {numerics['mkldnn']}):")
    for key in keys:
        values = [r[key] for r in results["runs"]]
        if isinstance(values[0], str):
            print(f"  {key}: {sorted(set(values))}")
        else:
            print(f"  {key}: {min(values):.4f} .. {max(values):.4f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.work is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
