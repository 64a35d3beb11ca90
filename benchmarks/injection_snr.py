"""Measured against design SNR of the synthetic dataset's injections.

Writes the synthetic dataset of a campaign config (default: the packaged demo, 2048 s at
1024 Hz, 24 injections) under a work directory with ``offline-iaas synth``'s code, then prints
each injection's network SNR against the design PSD (``network_snr_design``) and against the
PSD measured from the written frames (``network_snr``: median Welch around the injection), their
ratio, and the ratio's mean, smallest and largest value. The numbers quoted in
docs/architecture.md and docs/user-guide.md come from this script.

Usage: .venv/bin/python benchmarks/injection_snr.py [--config FILE.toml] [--work DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from offline_iaas.bench.provenance import source_commit
from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path,
                        help="campaign config (default: the packaged demo.toml)")
    parser.add_argument("--work", type=Path, help="where the frames go (default: a temporary "
                        "directory, removed)")
    args = parser.parse_args()
    config_path = args.config or Path(str(resources.files("offline_iaas.campaigns")
                                          / "demo.toml"))
    config = load_config(config_path, [])
    with tempfile.TemporaryDirectory() as tmp:
        summary = write_synthetic_dataset(config, args.work or Path(tmp) / "frames")
    rows = summary["injections"]
    print(f"# {len(rows)} injections of {config_path} at commit `{source_commit()}`")
    print("gps_time        design  measured  ratio   per-ifo ratios")
    ratios = []
    for inj in rows:
        ratio = inj["network_snr"] / inj["network_snr_design"]
        ratios.append(ratio)
        per_ifo = " ".join(f"{ifo} {rec['snr'] / rec['snr_design']:.4f}"
                           for ifo, rec in inj["ifos"].items())
        print(f"{inj['gps_time']:.3f}  {inj['network_snr_design']:6.2f}  "
              f"{inj['network_snr']:8.2f}  {ratio:.4f}  {per_ifo}")
    ratios = np.array(ratios)
    print(f"measured / design network SNR: mean {ratios.mean():.4f}, "
          f"min {ratios.min():.4f}, max {ratios.max():.4f}")
    loud = [(inj["network_snr"] >= 12, inj["network_snr_design"] >= 12) for inj in rows]
    print(f"network SNR >= 12: {sum(m for m, _ in loud)} measured, "
          f"{sum(d for _, d in loud)} design")


if __name__ == "__main__":
    main()
