"""Peak memory of the client and the merge for a client share of length T and 8T.

Runs two real campaigns (1 server, 1 client, run-local) over synthetic frames and reads the
peak RSS each node records in its sidecar (``parts/client0.json``, ``output/campaign.json``).
The defaults are sized so that holding the share in memory would show: 8T of two channels
at 4096 Hz is 256 MiB as float64, while the reader holds ``client.read_seconds`` at a time.

Usage: .venv/bin/python benchmarks/memory.py [--seconds T] [--rate HZ] [--out FILE]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from offline_iaas import records
from offline_iaas.bench.provenance import source_commit
from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.records import PartRecord
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import CampaignSummary
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag

CAMPAIGN = """
[data]
frames = "frames"
channels = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
start = 1262304000
duration = {duration}
sample_rate = {rate}

[synth]
file_duration = 64
frame_sample_rate = {rate}
witnesses = 0
injections = 0

[model]
repository = "model-repository"
kernel_seconds = 1.0
inference_rate = 4
batch_size = 64

[layout]
servers = 1
clients_per_server = 1
"""


def measure(root: Path, seconds: float, rate: float) -> dict[str, float]:
    config = load_config(root / "campaign.toml", [f"data.duration={seconds}"])
    export_repository(config)
    run_dir = root / f"run-{seconds:g}"
    make_dag(config, RunDir(run_dir))
    started = time.monotonic()
    run_local(RunDir(run_dir))
    wall = time.monotonic() - started
    client = records.read(PartRecord, RunDir(run_dir).part("client0")[1])
    merge = records.read(CampaignSummary, RunDir(run_dir).output[1])
    return {
        "seconds": seconds,
        "client_mib": client.peak_rss_mb,
        "merge_mib": merge.peak_rss_mb,
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=512.0, help="T, data seconds")
    parser.add_argument("--rate", type=float, default=4096.0, help="sample rate, Hz")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("MEMORY.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="offline-iaas-memory-") as tmp:
        root = Path(tmp)
        (root / "campaign.toml").write_text(
            CAMPAIGN.format(duration=8 * args.seconds, rate=args.rate)
        )
        write_synthetic_dataset(load_config(root / "campaign.toml"))
        rows = [measure(root, s, args.rate) for s in (args.seconds, 8 * args.seconds)]
    short, long = rows
    client_ratio = long["client_mib"] / short["client_mib"]
    merge_ratio = long["merge_mib"] / short["merge_mib"]
    verdict = "met" if max(client_ratio, merge_ratio) <= 1.2 else "NOT met"
    table = [
        "| client share (s) | client peak RSS (MiB) | merge peak RSS (MiB) | campaign wall (s) |",
        "| ---: | ---: | ---: | ---: |",
        *(
            f"| {r['seconds']:.0f} | {r['client_mib']:.0f} | {r['merge_mib']:.0f} "
            f"| {r['wall']:.1f} |"
            for r in rows
        ),
        f"| ratio 8T/T | {client_ratio:.3f} | {merge_ratio:.3f} | |",
    ]
    text = "\n".join(
        [
            "# Peak memory: client and merge, client share T vs 8T",
            "",
            f"Command: `.venv/bin/python benchmarks/memory.py --seconds {args.seconds:g} "
            f"--rate {args.rate:g}` at commit `{source_commit()}`.",
            f"Machine: {platform.machine()}, {platform.python_implementation()} "
            f"{platform.python_version()}; two channels at {args.rate:g} Hz, "
            f"1 server, 1 client, reads of 64 s.",
            "",
            *table,
            "",
            f"Target: both ratios <= 1.2 — {verdict}.",
            "",
        ]
    )
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
