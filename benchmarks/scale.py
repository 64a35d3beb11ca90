"""make-dag and status at O3 scale: one year of H1+L1, 100 servers x 16 clients (issue #20).

Writes, in a work directory:

- a science segment file with O3's structure: thousands of segments, lengths from a minute to
  days, gaps from seconds to days (seeded log-normal draws; about 75 % duty cycle);
- a LAL cache of 4096 s frame files of both observatories covering the year, files that need
  not exist (``make-dag --no-check`` plans from their names);
- the campaign config (classifier mode, 2048 Hz, 1 s windows at 4 Hz).

Then it times ``offline-iaas make-dag --no-check`` in a child process (wall time and peak
RSS), counts what it wrote (files, bytes, DAG lines), fakes DAGMan's node status file
mid-campaign, and times ``status`` on the result, as a child process (the command a user
types) and in process (``read_status`` alone). It also states how the DAG's lines and the
files grow with the layout: each DAG line and each file is put down to the node it names
(a server, a client, a shard merge, or none), giving ``lines = a x servers + b x clients +
c x shard merges + d`` (and the same for files); ``tests/test_scale.py`` checks a small run
against the formula that ``SCALE.md`` states. It prints a Markdown table, and with ``--out
FILE`` writes it, with the command and the commit.

    make demo       # the pilot: its shard merges' throughput, in demo-work/run
    .venv/bin/python benchmarks/scale.py --out benchmarks/SCALE.md --merge-pilot demo-work/run

With ``--merge-pilot`` (a finished demo run: its shard merges' throughput) it also plans the
O3-month DeepClean campaign from the bench's results (``benchmarks/results.json``: the
``o3-deepclean`` workload), writes its DAG and replays it (``plan --simulate``'s model) for
the expected makespan.

    .venv/bin/python benchmarks/scale.py --servers 4 --clients 4 --days 30   # a quick look
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from offline_iaas import records
from offline_iaas.bench.provenance import source_commit
from offline_iaas.digests import file_sha256
from offline_iaas.job_specs import read_client_job, read_shard_job
from offline_iaas.records import PartRecord, read_run_info
from offline_iaas.rundir import RunDir

O3_START = 1238166018  # 2019-04-01 15:00 UTC
FRAME_SECONDS = 4096


def o3_like_segments(start: float, seconds: float, seed: int = 0) -> list[tuple[int, int]]:
    """Science segments over ``[start, start + seconds)``: log-normal lengths (median 1 h,
    from 60 s to 3 days) and gaps (median 20 min, from 1 s to 5 days)."""
    rng = np.random.default_rng(seed)
    out, t = [], start + float(rng.uniform(0, 3600))
    while t < start + seconds:
        length = float(np.clip(rng.lognormal(np.log(3600), 1.2), 60, 3 * 86400))
        a, b = int(t), int(min(t + length, start + seconds))
        if b > a:
            out.append((a, b))
        t = b + float(np.clip(rng.lognormal(np.log(1200), 1.6), 1, 5 * 86400))
    return out


def write_inputs(work: Path, servers: int, clients: int, days: float) -> Path:
    """The segment file, the frame cache and the config; return the config's path."""
    seconds = days * 86400
    segments = o3_like_segments(O3_START, seconds)
    (work / "segments.txt").write_text("".join(f"{a} {b}\n" for a, b in segments))
    lines = []
    for obs, ifo in (("H", "H1"), ("L", "L1")):
        for gps in range(O3_START - O3_START % FRAME_SECONDS, int(O3_START + seconds),
                         FRAME_SECONDS):
            name = f"{obs}-{ifo}_HOFT_C01-{gps}-{FRAME_SECONDS}.gwf"
            lines.append(f"{obs} {ifo}_HOFT_C01 {gps} {FRAME_SECONDS} "
                         f"file://localhost/frames-not-here/{obs}/{name}")
    (work / "frames.lcf").write_text("\n".join(lines) + "\n")
    config = work / "o3-year.toml"
    config.write_text(f"""
[data]
frames = "{work / 'frames.lcf'}"
channels = ["H1:GDS-CALIB_STRAIN_C01", "L1:GDS-CALIB_STRAIN_C01"]
start = {O3_START}
duration = {seconds:.0f}
sample_rate = 2048
segments = "{work / 'segments.txt'}"

[model]
repository = "{work / 'model-repository'}"
kernel_seconds = 1.0
inference_rate = 4
batch_size = 128

[layout]
servers = {servers}
clients_per_server = {clients}

[server]
bind = "0.0.0.0"
gpus = 1

[site]
profile = "ldg"
accounting_group = "ligo.prod.o3.cbc.bbh.bbhnet"
""")
    return config


def executable() -> str:
    return str(Path(sys.executable).with_name("offline-iaas"))


def timed_child(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MiB) of a child process, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024, proc.stdout


def fake_node_status(run_dir: Path, done_share: float = 0.5) -> None:
    """DAGMan's node status file mid-campaign: servers running, a share of clients done (with
    complete part sidecars), some running, the rest idle."""
    run = RunDir(run_dir)
    info = read_run_info(run)
    ads = []
    for server in info.servers:
        ads.append(f'[ Type = "NodeStatus"; Node = "{server}"; NodeStatus = 3; '
                   'StatusDetails = "running"; RetryCount = 0; ]')
    clients = info.clients
    done = int(len(clients) * done_share)
    for i, node in enumerate(clients):
        code, detail = (5, "") if i < done else (3, "running") if i < done + 50 else (1, "")
        ads.append(f'[ Type = "NodeStatus"; Node = "{node}"; NodeStatus = {code}; '
                   f'StatusDetails = "{detail}"; RetryCount = 0; ]')
        if code == 5:
            segment = read_client_job(run, node)
            data = run.part(node)[0]
            data.write_bytes(b"part")
            records.write(PartRecord(
                complete=True, index=segment.index, node=node, server=segment.server,
                pieces=segment.pieces, stream_hash=info.stream_hash, outputs=("statistic",),
                sha256=file_sha256(data), bytes=4, wall_seconds=1.0, peak_rss_mb=1.0,
                reconnects=0, first_request_unix=None, last_response_unix=None,
                tensor_bytes_sent=0, servers=(segment.server,)), run.part(node)[1])
    (run_dir / "offline.status").write_text("\n".join(ads) + "\n")


KINDS: tuple[str, ...] = ("servers", "clients", "shard merges")
NODE_NAME = re.compile(r"^(server|client|shard)\d+$")
KIND_OF_PREFIX = {"server": "servers", "client": "clients", "shard": "shard merges"}


def kind_of(words: list[str]) -> str | None:
    """The kind of the last node a line's (or a path's) words name, a PARENT line's child's;
    None if none."""
    if "CHILD" in words:
        words = words[words.index("CHILD") + 1:]
    for word in reversed(words):
        match = NODE_NAME.match(word)
        if match:
            return KIND_OF_PREFIX[match.group(1)]
    return None


def growth(items: list[list[str]], counts: dict[str, int]) -> dict[str, float]:
    """Per kind, items (DAG lines or files, as words) per node of that kind, and the rest."""
    tally = dict.fromkeys((*KINDS, "rest"), 0)
    for words in items:
        tally[kind_of(words) or "rest"] += 1
    out = {kind: tally[kind] / counts[kind] if counts[kind] else 0.0 for kind in KINDS}
    out["rest"] = tally["rest"]
    return out


def formula(name: str, per: dict[str, float]) -> str:
    """``name = a × servers + b × clients + c × shard merges + d``."""
    terms = " + ".join(f"{per[kind]:g} × {kind}" for kind in KINDS)
    return f"{name} = {terms} + {per['rest']:g}"


def measure(servers: int, clients: int, days: float, work: Path) -> dict[str, object]:
    config = write_inputs(work, servers, clients, days)
    run_dir = work / "run"
    wall, peak, _ = timed_child([executable(), "make-dag", str(config), "--out", str(run_dir),
                                 "--no-check", "-q"])
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    dag = (run_dir / "offline.dag").read_text().splitlines()
    dag_lines = len(dag)
    fake_node_status(run_dir)
    status_wall, _, status_text = timed_child([executable(), "status", str(run_dir)])
    from offline_iaas.workflow.status import read_status

    started = time.monotonic()
    read_status(RunDir(run_dir))
    in_process = time.monotonic() - started
    segments = len((work / "segments.txt").read_text().splitlines())
    shards = len(read_run_info(RunDir(run_dir)).shards)
    counts = {"servers": servers, "clients": servers * clients, "shard merges": shards}
    lines_per = growth([line.split() for line in dag], counts)
    files_per = growth([[*p.relative_to(run_dir).parent.parts, p.stem.split(".")[0]]
                        for p in files], counts)
    return {
        "layout": f"{servers} servers x {clients} clients",
        "span": f"{days:g} days, {segments} science segments, "
                f"{len((work / 'frames.lcf').read_text().splitlines())} cached frame files",
        "make-dag wall [s]": round(wall, 2),
        "make-dag peak RSS [MiB]": round(peak, 1),
        "files written": len(files),
        "bytes written": sum(p.stat().st_size for p in files),
        "DAG lines": dag_lines,
        "shard merges (merge.shard_seconds = 4096)": shards,
        "status command wall [s]": round(status_wall, 2),
        "read_status in process [s]": round(in_process, 3),
        "status says": next((line for line in status_text.splitlines()
                             if line.startswith("data seconds done")), ""),
        "growth of the DAG": formula("DAG lines", lines_per),
        "growth of the files": formula("files written", files_per),
    }


O3_MONTH = Path(__file__).resolve().parents[1] / "workflow/o3-month-deepclean.toml"
SERVER_START_SECONDS = 120.0
"""Assumed: a GPU node's job starting and Triton loading the model (not measured here)."""
JOB_START_SECONDS = 60.0
"""Assumed: HTCondor matching and starting a job (not measured here)."""
FAILURE_RATE = 0.02
"""Assumed: share of client attempts that fail (then retried from their checkpoints)."""


def o3_month_makespan(work: Path, merge_pilot: Path, target_hours: float) -> dict[str, object]:
    """The O3-month DeepClean campaign at ``plan``'s recommendation (from the bench's results
    and the merge throughput of ``merge_pilot``, a finished demo run), its DAG written with
    ``make-dag --no-check`` and replayed (``sizing/simulate.py``)."""
    from offline_iaas.config import load_config
    from offline_iaas.job_specs import read_client_job
    from offline_iaas.sizing.pilot import read_pilot
    from offline_iaas.sizing.plan import plan_from_bench, recommend_shard_seconds
    from offline_iaas.sizing.replay import FailureModel, SimulationRates
    from offline_iaas.sizing.simulate import share_work_seconds, simulate
    from offline_iaas.workflow.dag import parse_dag

    root = Path(__file__).resolve().parents[1]
    config = load_config(O3_MONTH)
    plan = plan_from_bench(config, target_hours, root / "benchmarks" / "results.json")
    pilot = read_pilot(RunDir(merge_pilot))
    # a merge's work grows with the samples it post-processes: the demo's shard merges
    # handle 2 detectors at its rate, the O3 month 1 detector at 4096 Hz
    samples = len(pilot.config.ifos) * pilot.config.data.sample_rate
    merge_rate = pilot.merge_rate * samples / (len(config.ifos) * config.data.sample_rate)
    streaming = config.data.duration / (plan.servers * plan.per_server_rate)
    shard_seconds = recommend_shard_seconds(config, merge_rate, streaming)
    cache = work / "o3-month.lcf"
    first = int(config.data.start - config.data.start % FRAME_SECONDS)
    cache.write_text("".join(
        f"H H1_HOFT_C01 {gps} {FRAME_SECONDS} file://localhost/frames-not-here/H-H1_HOFT_C01-"
        f"{gps}-{FRAME_SECONDS}.gwf\n"
        for gps in range(first, int(config.data.start + config.data.duration), FRAME_SECONDS)))
    run_dir = work / "o3-month-run"
    overrides = [*plan.overrides(), f"merge.shard_seconds={shard_seconds:g}",
                 f'data.frames="{cache}"', 'data.datafind_server=""', "data.frametypes=[]"]
    timed_child([executable(), "make-dag", str(O3_MONTH), "--out", str(run_dir), "--no-check",
                 "-q", *(a for o in overrides for a in ("--set", o))])
    info = read_run_info(RunDir(run_dir))
    work_seconds = share_work_seconds(read_client_job(RunDir(run_dir), n)
                                        for n in info.clients)
    for node in info.shards:
        work_seconds[node] = read_shard_job(RunDir(run_dir), node).data_seconds
    rates = SimulationRates(
        server_data_seconds_per_second=plan.per_server_rate,
        merge_data_seconds_per_second=merge_rate,
        merge_index_seconds=pilot.index_seconds * len(info.shards) / max(1, pilot.shards),
        final_seconds=pilot.final_seconds, server_start_seconds=SERVER_START_SECONDS,
        job_start_seconds=JOB_START_SECONDS)
    dag = parse_dag((run_dir / "offline.dag").read_text())
    result = simulate(dag, work_seconds, rates, FailureModel(
        failure_rate=FAILURE_RATE, failover_seconds=600.0, seed=0, replications=50))
    return {
        "campaign": f"{O3_MONTH.name}: {config.data.duration / 86400:g} days, mode deepclean, "
                    f"{len(config.stream_channels)} channels at {config.data.sample_rate:g} Hz",
        "plan (from benchmarks/results.json)":
            f"{plan.servers} servers x {plan.instances} instance(s) x "
            f"{plan.clients_per_server} clients, batch "
            f"{plan.batch_size}, {plan.per_server_rate:,.1f} data-s/s per server",
        "merge throughput per shard merge [data-s/s]":
            f"{merge_rate:,.0f} (the demo's {pilot.merge_rate:,.0f} at "
            f"{samples:g} samples/s, scaled to {len(config.ifos) * config.data.sample_rate:g})",
        "recommended merge.shard_seconds": f"{shard_seconds:g} ({len(info.shards)} shard "
                                            "merges)",
        "assumed": f"server start {SERVER_START_SECONDS:g} s, job start {JOB_START_SECONDS:g} "
                   f"s, {100 * FAILURE_RATE:g} % of client attempts fail (RETRY "
                   f"{config.workflow.retries})",
        "simulated makespan [h]": f"{result.makespan_seconds / 3600:.2f} (p90 "
                                  f"{result.p90_seconds / 3600:.2f}; 50 replications)",
        "stages [h]": ", ".join(
            f"{name} {value / 3600:.2f}" for name, value in (
                ("servers ready", result.stages.servers_ready_seconds),
                ("last client", result.stages.clients_done_seconds),
                ("last shard merge", result.stages.shards_done_seconds),
                ("index", result.stages.merge_done_seconds)) if value is not None),
        "critical path": " -> ".join(result.critical_path),
        "one merge node instead [h]":
            f"{(streaming + config.data.duration / merge_rate) / 3600:.2f} (streaming, then "
            "the whole month at one merge's rate)",
    }


def table(result: dict[str, object]) -> str:
    rows = "\n".join(f"| {key} | {value} |" for key, value in result.items())
    return f"| quantity | value |\n| --- | --- |\n{rows}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--clients", type=int, default=16, help="clients per server")
    parser.add_argument("--days", type=float, default=365)
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--merge-pilot", type=Path, help="a finished demo run (its shard "
                        "merges' throughput) for the O3-month makespan simulation")
    parser.add_argument("--target-hours", type=float, default=24.0,
                        help="the O3-month campaign's deadline for plan (default 24)")
    parser.add_argument("--work-dir", type=Path, help="write the inputs and the run directories "
                        "here and keep them (default: a temporary directory, removed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="offline-iaas-scale-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = measure(args.servers, args.clients, args.days, work)
        month = (o3_month_makespan(work, args.merge_pilot, args.target_hours)
                 if args.merge_pilot else None)
    text = table(result) + (
        "\nHow the DAG and the files grow (each DAG line and file put down to the node it "
        "names; `tests/test_scale.py` checks a small run against these formulas):\n\n"
        f"- {result['growth of the DAG']}\n- {result['growth of the files']}\n")
    if month is not None:
        text += ("\n## The O3-month DeepClean campaign, simulated at the recommended plan\n\n"
                 f"`plan --target-hours {args.target_hours:g} --from-bench "
                 "benchmarks/results.json` on `workflow/o3-month-deepclean.toml` (the bench's "
                 "`o3-deepclean` workload: its stream exactly), its DAG written by `make-dag "
                 "--no-check` and replayed by `sizing/simulate.py`. The merge's throughput comes "
                 f"from the pilot `{args.merge_pilot}`: the demo's run directory, made by `make "
                 "demo` (`offline-iaas demo --workdir demo-work`) on the same commit.\n\n"
                 + table(month))
    print(text)
    if args.out is not None:
        machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
        command = (f".venv/bin/python benchmarks/scale.py --servers {args.servers} --clients "
                   f"{args.clients} --days {args.days:g} --out {args.out}"
                   + (f" --merge-pilot {args.merge_pilot}" if args.merge_pilot else "")
                   + (f" --target-hours {args.target_hours:g}"
                      if args.target_hours != 24.0 else ""))
        args.out.write_text(
            "# make-dag and status at O3 scale\n\n"
            f"Generated by `{command}` at commit `{source_commit()}` on {machine}"
            + (" after `make demo` (the pilot)" if args.merge_pilot else "")
            + "; see the script's docstring for what is generated and timed.\n\n" + text)


if __name__ == "__main__":
    main()
