"""The merge as a tree on the demo data (issue #20): throughput, whole-campaign wall, simulation.

1. Runs the e2e demo twice through its DAG (``offline-iaas demo``): shard merges of
   ``merge.shard_seconds = 4096`` (the default) and one merge node (``= 0``); reports each
   campaign's wall time (``run-local``'s, from the first node's start to the last's end).
2. On the sharded demo's parts, writes the DAG again for 1, 4 and 16 shards (and one merge
   node) and runs only the merge nodes, the shard merges two at a time (this machine's cores):
   per node data seconds, wall and CPU seconds, and the merge stage's wall (shards + index).
3. Replays (``plan --simulate``) a second campaign of the demo data with another layout (4
   shards, at most 2 clients at once) from the first demo's rates, then runs it for real and
   compares the makespans.

    .venv/bin/python benchmarks/merge_tree.py --out benchmarks/MERGE.md
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from offline_iaas import records
from offline_iaas.bench.provenance import source_commit
from offline_iaas.records import read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import CampaignSummary, ShardSummary

OFFLINE_IAAS = str(Path(sys.executable).parent / "offline-iaas")
LAYOUTS = [("one merge node", 0), ("1 shard", 32768), ("4 shards", 640), ("16 shards", 128)]
"""The demo's 2048 s from GPS 1262304000 fall in 1, 4 and 16 aligned shards of these sizes."""


def run(*args: str) -> str:
    """Run an offline-iaas command; its standard output."""
    done = subprocess.run([OFFLINE_IAAS, *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"offline-iaas {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def local_wall(run_dir: Path, prefix: str = "") -> float:
    """Seconds from run-local's first node start to the end of the last node whose name
    starts with ``prefix`` (any node: the campaign's wall)."""
    from offline_iaas.sizing.pilot import unix_seconds

    nodes = json.loads((run_dir / "local-state.json").read_text())["nodes"]
    starts = [unix_seconds(n["started"]) for n in nodes.values() if n.get("started")]
    ends = [unix_seconds(n["ended"]) for name, n in nodes.items()
            if n.get("ended") and name.startswith(prefix)]
    return max(ends) - min(starts)


def client_intervals(run_dir: Path) -> list[tuple[str, str, float, float]]:
    """``(client, its server, start, end)`` of run-local's client nodes, seconds from the
    first node's start, in start order."""
    from offline_iaas.job_specs import read_client_job
    from offline_iaas.sizing.pilot import unix_seconds

    nodes = json.loads((run_dir / "local-state.json").read_text())["nodes"]
    origin = min(unix_seconds(n["started"]) for n in nodes.values() if n.get("started"))
    rows = [(name, read_client_job(RunDir(run_dir), name).server,
             unix_seconds(n["started"]) - origin,
             unix_seconds(n["ended"]) - origin)
            for name, n in nodes.items() if name.startswith("client")]
    return sorted(rows, key=lambda row: row[2])


def shard_node(args: tuple[str, str]) -> None:
    from offline_iaas.merge.shard_merge import merge_shard

    merge_shard(RunDir(Path(args[0])), args[1])


def merge_only(source: Path, target: Path, shard_seconds: float) -> dict:
    """The DAG of ``source`` written again for ``shard_seconds``, its parts copied, and only
    its merge nodes run: shard merges two at a time, then the index."""
    from offline_iaas.config import load_config
    from offline_iaas.merge.merge import merge
    from offline_iaas.workflow.make_dag import make_dag

    shutil.copytree(source, target, ignore=shutil.ignore_patterns(
        "output", "logs", "scratch", "local-state.json", "monitor"))
    config = load_config(target / "campaign.toml", [f"merge.shard_seconds={shard_seconds}"])
    make_dag(config, RunDir(target))
    shards = read_run_info(RunDir(target)).shards
    started = time.monotonic()
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(shard_node, [(str(target), node) for node in shards]))
    shards_wall = time.monotonic() - started
    merge(RunDir(target))
    stage = time.monotonic() - started
    summary = records.read(CampaignSummary, RunDir(target).output[1])
    done = [records.read(ShardSummary, RunDir(target).shard_output(n)[1]) for n in shards]
    return {"shards": len(shards), "stage_seconds": stage, "shards_seconds": shards_wall,
            "index_seconds": summary.wall_seconds, "index_cpu": summary.cpu_seconds,
            "nodes": [(r.data_seconds, r.wall_seconds, r.cpu_seconds) for r in done]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="merge-tree-"))
    lines = ["# The merge as a tree on the demo data", "",
             f"Generated by `.venv/bin/python benchmarks/merge_tree.py --out {args.out}` at "
             f"commit `{source_commit()}` on "
             f"{platform.machine()}, Python {platform.python_version()}, 2 cores; e2e demo: "
             "2048 s of H1+L1 at 1024 Hz, 2 servers x 2 clients.", ""]

    walls = {}
    for name, shard_seconds in (("sharded", 4096), ("single", 0)):
        run("demo", "--workdir", str(work / name), "--set", f"merge.shard_seconds={shard_seconds}")
        walls[name] = local_wall(work / name / "run")
    lines += ["## Whole campaign (run-local of the demo's DAG)", "",
              "| merge | campaign wall [s] |", "| --- | --- |",
              f"| shard merges (merge.shard_seconds = 4096: 2 shards) | {walls['sharded']:.1f} |",
              f"| one merge node (merge.shard_seconds = 0) | {walls['single']:.1f} |", ""]

    lines += ["## Merge throughput (the merge nodes alone, on the sharded demo's parts)", "",
              "Shard merges run two at a time (2 cores); the index after them. Per node: data "
              "seconds / wall seconds of its own work.", "",
              "| layout | merge nodes | per node [data-s/s] (min-max) | per node CPU [s] "
              "(mean) | shard merges wall [s] | index [s] | merge stage wall [s] | total "
              "[data-s/s] |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, shard_seconds in LAYOUTS:
        got = merge_only(work / "sharded" / "run", work / f"merge-{shard_seconds}", shard_seconds)
        if got["nodes"]:
            rates = [d / w for d, w, _ in got["nodes"]]
            cpu = sum(c for *_, c in got["nodes"]) / len(got["nodes"])
            per_node = f"{min(rates):,.0f}-{max(rates):,.0f}"
            shard_wall = f"{got['shards_seconds']:.1f}"
        else:
            per_node, cpu = f"{2048 / got['index_seconds']:,.0f}", got["index_cpu"]
            shard_wall = "-"
        lines.append(f"| {name} | {got['shards'] or 1} | {per_node} | {cpu:.1f} | {shard_wall} "
                     f"| {got['index_seconds']:.1f} | {got['stage_seconds']:.1f} | "
                     f"{2048 / got['stage_seconds']:,.0f} |")
    lines.append("")

    target = work / "target"
    shutil.copytree(work / "sharded", target, ignore=shutil.ignore_patterns("run", "reference*"))
    config_path = work / "sharded" / "run" / "campaign.toml"
    run("make-dag", str(config_path), "--out", str(target / "run"), "--set",
        "merge.shard_seconds=640", "--set", "workflow.max_parallel_clients=2")
    simulated = json.loads(run("plan", str(config_path), "--simulate", str(target / "run"),
                               "--from-run", str(work / "sharded" / "run"), "--json", "-q"))
    run("run-local", str(target / "run"))
    lines += ["## plan --simulate against a real run-local", "",
              "Rates from the sharded demo; the target: the same data with 4 shard merges "
              "(merge.shard_seconds = 640) and at most 2 clients at once "
              "(workflow.max_parallel_clients = 2). Seconds from the DAG's first node start.", "",
              "| until | simulated [s] | run-local [s] | error |", "| --- | --- | --- | --- |"]
    for label, stage, prefix in (("the last client ends", "clients_done_seconds", "client"),
                                 ("the campaign ends (makespan)", None, "")):
        predicted = simulated["stages"][stage] if stage else simulated["makespan_seconds"]
        real = local_wall(target / "run", prefix)
        lines.append(f"| {label} | {predicted:.1f} | {real:.1f} | "
                     f"{100 * (predicted - real) / real:+.0f} % |")
    lines += ["", "The target's client nodes as run-local ran them:", "",
              "| client | server | started [s] | ended [s] |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {server} | {start:.1f} | {end:.1f} |"
              for name, server, start, end in client_intervals(target / "run")]
    lines += ["", "The replay gives every server the rate one server of the pilot streamed (the "
              "pilot's total over its servers), shared among the clients streaming to it: "
              "servers on separate nodes, as on a cluster. run-local runs every server on this "
              "machine's cores, so a server streaming while the other has no client gets more "
              "than that share; the replay does not model servers that share a host.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
