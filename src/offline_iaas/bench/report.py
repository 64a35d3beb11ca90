"""Tables, plots and ``RESULTS.md`` from the bench's measurements.

The tables show each path at each point by its best repeat in data seconds per wall second,
and by its cheapest repeat in data seconds per CPU second (client and server processes, or the
limit's workers; other processes can only add to that cost). The targets are judged more
strictly, with the service's median repeat against the best limit at that batch size
(``bench/targets.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offline_iaas.bench.results import Measurement, best_by_path, cpu_efficiency_by_path
from offline_iaas.bench.sweep import SweepPlan
from offline_iaas.bench.targets import TargetCheck, judge, missed_lines
from offline_iaas.bench.workloads import workload

PATHS: tuple[str, ...] = ("limit", "service", "whole-window-limit", "whole-window", "naive")


@dataclass(frozen=True)
class Point:
    """The best measurement of each path at one sweep point of one workload."""

    workload: str
    batch_size: int
    clients: int
    instances: int
    """``server.instances`` of the service (the limit's worker processes)."""
    best: dict[str, Measurement]
    """The fastest repeat of each path (data seconds per wall second)."""
    per_cpu: dict[str, float]
    """The highest data seconds per CPU second of each path over its repeats."""

    def ratio(self, top: str, bottom: str) -> float:
        """Data seconds per wall second of ``top`` over ``bottom`` (NaN if one is missing)."""
        if top not in self.best or bottom not in self.best:
            return float("nan")
        return self.best[top].data_seconds_per_second / self.best[bottom].data_seconds_per_second

    def cpu_ratio(self, top: str, bottom: str) -> float:
        """Data seconds per CPU second of ``top`` over ``bottom``."""
        if top not in self.per_cpu or bottom not in self.per_cpu:
            return float("nan")
        return self.per_cpu[top] / self.per_cpu[bottom]


def points(measurements: list[Measurement]) -> list[Point]:
    """Group measurements by (workload, batch size, clients, instances), in order of first
    appearance."""
    groups: dict[tuple[str, int, int, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.workload, m.batch_size, m.clients, m.threads), []).append(m)
    return [
        Point(name, batch, clients, n, best_by_path(group), cpu_efficiency_by_path(group))
        for (name, batch, clients, n), group in groups.items()
    ]


def _fmt(value: float, digits: int = 2) -> str:
    return "—" if value != value else f"{value:.{digits}f}"


def throughput_table(pts: list[Point]) -> str:
    """Markdown table: data seconds per wall second of each path and the ratios."""
    lines = [
        "| workload | batch | clients | instances | limit | service | whole-window limit "
        "| whole-window | naive "
        "| service/limit | service/whole-window | service/naive | service/limit per CPU s "
        "| service/whole-window per CPU s | service/naive per CPU s "
        "| cores used: limit, service | other load (cores): limit, service |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in pts:
        rate = {k: _fmt(m.data_seconds_per_second, 1) for k, m in p.best.items()}
        cores = {k: _fmt(m.cpu_seconds / m.wall_seconds, 2) for k, m in p.best.items()}
        other = {k: _fmt(m.other_cpu_seconds / m.wall_seconds, 1) for k, m in p.best.items()}
        lines.append(
            f"| {p.workload} | {p.batch_size} | {p.clients} | {p.instances} | "
            f"{rate.get('limit', '—')} | "
            f"{rate.get('service', '—')} | {rate.get('whole-window-limit', '—')} | "
            f"{rate.get('whole-window', '—')} | "
            f"{rate.get('naive', '—')} | {_fmt(p.ratio('service', 'limit'))} | "
            f"{_fmt(p.ratio('service', 'whole-window'))} | "
            f"{_fmt(p.ratio('service', 'naive'))} | {_fmt(p.cpu_ratio('service', 'limit'))} | "
            f"{_fmt(p.cpu_ratio('service', 'whole-window'))} | "
            f"{_fmt(p.cpu_ratio('service', 'naive'))} | "
            f"{cores.get('limit', '—')}, {cores.get('service', '—')} | "
            f"{other.get('limit', '—')}, {other.get('service', '—')} |"
        )
    return "\n".join(lines)


def cost_table(pts: list[Point]) -> str:
    """Markdown table: bytes and CPU time per data second of each served path."""
    lines = [
        "| workload | batch | clients | instances | path | sent (B/data-s) "
        "| received (B/data-s) | client CPU (ms/data-s) | server CPU (ms/data-s) "
        "| least CPU of the repeats (ms/data-s) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in pts:
        for path in PATHS:
            m = p.best.get(path)
            if m is None:
                continue
            lines.append(
                f"| {p.workload} | {p.batch_size} | {p.clients} | {p.instances} | {path} | "
                f"{m.bytes_sent_per_data_second:,.0f} | {m.bytes_received_per_data_second:,.0f} "
                f"| {1e3 * m.client_cpu_seconds / m.data_seconds:.2f} | "
                f"{1e3 * m.server_cpu_seconds / m.data_seconds:.2f} | "
                f"{1e3 / p.per_cpu[path]:.2f} |"
            )
    return "\n".join(lines)


def _is_default(p: Point, plan: SweepPlan) -> bool:
    """``p`` is its workload's default point (where the targets are judged)."""
    return (p.batch_size, p.clients, p.instances) == (
        plan.batch_size_of(workload(p.workload)), plan.default_clients, plan.default_instances)


def _checks_at(measurements: list[Measurement], p: Point) -> list[TargetCheck]:
    return judge(measurements, p.workload, p.batch_size, p.clients, p.instances)


def target_checks(measurements: list[Measurement], plan: SweepPlan) -> list[TargetCheck]:
    """The issue's targets at each workload's default point."""
    return [c for p in points(measurements) if _is_default(p, plan)
            for c in _checks_at(measurements, p)]


def _met_at(measurements: list[Measurement]) -> dict[tuple[str, str], list[str]]:
    """For each (workload, target), the sweep points where it is met."""
    met: dict[tuple[str, str], list[str]] = {}
    for p in points(measurements):
        for c in _checks_at(measurements, p):
            where = f"batch {p.batch_size}, {p.clients} client(s), {p.instances} instance(s)"
            met.setdefault((c.workload, c.name), [])
            if c.met:
                met[(c.workload, c.name)].append(where)
    return met


def targets_table(measurements: list[Measurement], plan: SweepPlan) -> str:
    """The targets at the default point with the repeats' spread, and at how many sweep
    points each is met."""
    met_at = _met_at(measurements)
    counts = {}
    for p in points(measurements):
        for c in _checks_at(measurements, p):
            counts[(c.workload, c.name)] = counts.get((c.workload, c.name), 0) + 1
    lines = [
        "| workload | quantity | service: median [least–most] (repeats) | opponent at this "
        "batch: median [least–most] (repeats), best | per wall s | per CPU s | target "
        "| met (both) | met at sweep points |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for c in target_checks(measurements, plan):
        sign = "≤" if c.lower_is_better else "≥"
        opponent = (f"{c.opponent.text()}, {c.opponent.best:.1f}" if c.opponent else "—")
        lines.append(
            f"| {c.workload} | {c.name} | {c.service.text() if c.service else '—'} | "
            f"{opponent} | {_fmt(c.value, 3)} | {_fmt(c.cpu_value, 3)} | "
            f"{sign} {c.threshold:g} | {'yes' if c.met else '**no**'} | "
            f"{len(met_at[(c.workload, c.name)])} of {counts[(c.workload, c.name)]} |"
        )
    return "\n".join(lines)


def missed_targets(measurements: list[Measurement], plan: SweepPlan) -> list[str]:
    """Why each missed target at the default points is missed, and what would meet it."""
    met_at = _met_at(measurements)
    return [line for c in target_checks(measurements, plan)
            for line in missed_lines(measurements, c, plan.batch_size_of(workload(c.workload)),
                                     plan.default_instances, met_at[(c.workload, c.name)])]


def plot_throughput(pts: list[Point], plan: SweepPlan, out_png: Path) -> Path:
    """Data seconds per wall second of each path against batch size and against clients.

    One row of two panels per workload: the batch-size sweep (at the default clients) and the
    client sweep (at the workload's default batch size).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(p.workload for p in pts))
    fig, axes = plt.subplots(len(names), 2, figsize=(10, 3.6 * len(names)), squeeze=False)
    styles = {"limit": "--", "service": "-o", "whole-window-limit": ":", "whole-window": ":^",
              "naive": "-s"}
    colours = {n: f"C{i}" for i, n in enumerate(sorted(plan.instances, reverse=True))}
    clients = plan.default_clients
    for row, name in enumerate(names):
        mine = [p for p in pts if p.workload == name]
        batch_size = plan.batch_size_of(workload(name))
        sweeps = (
            ("batch size (windows per request)", "batch_size",
             [p for p in mine if p.clients == clients
              and p.instances == plan.default_instances], f"{clients} clients"),
            ("clients (k)", "clients",
             [p for p in mine if p.batch_size == batch_size], f"batch {batch_size}"),
        )
        for col, (xlabel, attr, chosen, fixed) in enumerate(sweeps):
            axis = axes[row][col]
            chosen = sorted(chosen, key=lambda p: getattr(p, attr))
            for n in sorted({p.instances for p in chosen}, reverse=True):
                for path, style in styles.items():
                    xy = [(getattr(p, attr), p.best[path].data_seconds_per_second)
                          for p in chosen if path in p.best and p.instances == n]
                    if xy:
                        xs, ys = zip(*xy, strict=True)
                        axis.plot(xs, ys, style, color=colours.get(n, "k"),
                                  label=f"{path}, {n} instance(s)")
            if attr == "batch_size":
                axis.set_xscale("log", base=2)
            axis.set_xticks(sorted({getattr(p, attr) for p in chosen}))
            axis.set_xticklabels([str(v) for v in sorted({getattr(p, attr) for p in chosen})])
            axis.set_xlabel(xlabel)
            axis.set_ylabel("data seconds / wall second")
            axis.set_title(f"{name} ({fixed})")
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def _interpretation(pts: list[Point], plan: SweepPlan) -> list[str]:
    """Sentences computed from the numbers: where the CPU goes at the default point."""
    lines = []
    for p in pts:
        if not _is_default(p, plan):
            continue
        if not {"service", "naive", "limit"} <= set(p.per_cpu):
            continue
        load = workload(p.workload)
        ms = {path: 1e3 / p.per_cpu[path] for path in ("limit", "service", "naive")}
        sent = p.best["naive"].bytes_sent_per_data_second / max(
            p.best["service"].bytes_sent_per_data_second, 1.0
        )
        lines.append(
            f"- **{p.workload}**: the naive path sends {sent:.1f}x the service's bytes "
            f"(kernel/stride = {load.kernel_samples // load.stride_samples}). The service "
            f"runs the same windows through the same graphs ({ms['limit']:.2f} ms of CPU per "
            "data second in-process); the network's compute is "
            f"{100 * ms['limit'] / ms['service']:.0f}% of "
            f"the service's CPU per data second ({ms['limit']:.2f} of {ms['service']:.2f} ms), "
            f"the naive path spends {ms['naive']:.2f} ms: on a CPU-bound machine service/naive "
            f"cannot exceed naive CPU / service CPU = {ms['naive'] / ms['service']:.2f}."
        )
    return lines


def _mean_cores(measurements: list[Measurement], path: str) -> tuple[float, float]:
    """Mean cores a path got, and mean cores other processes used meanwhile."""
    chosen = [m for m in measurements if m.path == path]
    wall = max(sum(m.wall_seconds for m in chosen), 1e-9)
    return (sum(m.cpu_seconds for m in chosen) / wall,
            sum(m.other_cpu_seconds for m in chosen) / wall)


def _streamed_sentence(names: list[str]) -> str:
    """Which of the run's workloads serve their networks streamed layer by layer."""
    streamed = [f"**{name}**" for name in names if workload(name).streamed]
    whole = [f"**{name}**" for name in names if not workload(name).streamed]
    verb = "serves its" if len(streamed) == 1 else "serve their"
    return ((", ".join(streamed) + f" {verb} networks streamed layer by layer "
             "(`model.streamed`, docs/networks.md \"Streamed graphs\")" if streamed else "")
            + ("; " if streamed and whole else "")
            + (", ".join(whole) + " on whole windows" if whole else "") + ".")


def results_markdown(header: dict, measurements: list[Measurement], plan) -> str:
    """The text of ``RESULTS.md``."""
    pts = points(measurements)
    checks = target_checks(measurements, plan)
    met = sum(c.met for c in checks)
    missed = missed_targets(measurements, plan)
    defaults = ", ".join(
        f"{name} batch {plan.batch_size_of(workload(name))}" for name in plan.workloads
    )
    parts = [
        "# Throughput: the campaign's served model against its limit and the naive baseline",
        "",
        "Generated by `offline-iaas bench`; do not edit by hand (see `NOTES.md` for the "
        "attempts and their analysis).",
        "",
        *_setup_lines(header, measurements, plan),
        "",
        *_definition_lines(plan),
        "",
        f"## Targets (default points: {defaults}; {plan.default_clients} clients, "
        f"{plan.default_instances} instances) — {met} of {len(checks)} met",
        "",
        targets_table(measurements, plan),
        "",
        *(["### Missed targets", "", *missed, ""] if missed else []),
        *_interpretation(pts, plan),
        "",
        "## Throughput (data seconds per wall second)",
        "",
        throughput_table(pts),
        "",
        "![throughput](throughput.png)",
        "",
        "## Bytes and CPU per data second",
        "",
        "Bytes are TCP payload on the clients' connections (gRPC and HTTP/2 framing "
        "included); client CPU covers the client processes while streaming, server CPU "
        "tritonserver and its python-backend stubs.",
        "",
        cost_table(pts),
        "",
        "## Server statistics over the run",
        "",
        "The service's tritonserver statistics, polled every "
        "0.5 s by `serve/monitor.py` (CSV in `monitor/`):",
        "",
        "![monitor](monitor.png)",
        "",
        "## Sizing a campaign from these numbers",
        "",
        "`offline-iaas plan CONFIG --target-hours H --from-bench results.json` (`sizing/plan.py`)"
        " takes the service's median throughput measured here for the workload that streams "
        "what the campaign streams (else its mode's, scaled), at the number of instances it "
        "recommends (`server.instances`, at most the cores a server gets).",
        "",
        "## GPU",
        "",
        *_gpu_lines(header),
        "",
    ]
    return "\n".join(parts)


def _setup_lines(header: dict, measurements: list[Measurement], plan) -> list[str]:
    """RESULTS.md's bullets on how the run was made: the command, the machine, the layout,
    the load of other processes and how a target is judged."""
    machine = header["machine"]
    cores = {path: _mean_cores(measurements, path) for path in ("limit", "service")}
    return [
        f"- **Command**: `{header['command']}` at commit `{header.get('commit', 'unknown')}` "
        f"— took {header['elapsed_seconds']:.0f} s, started {header['started']}"
        + (f"; the text redrawn from its results.json by `offline-iaas bench --report-only` at "
           f"commit `{header['redrawn_at']}`." if "redrawn_at" in header else "."),
        f"- **Machine**: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, Linux {machine['kernel']}, Python {machine['python']}, "
        f"onnxruntime {machine['onnxruntime']}, tritonserver from nvidia-pytriton "
        f"{machine['nvidia-pytriton']} (python backend). " + _device_text(header, machine),
        "- **Layout**: the server runs the workload's repository as `offline-iaas export` "
        "writes it, with `server.instances` = "
        f"{' and '.join(map(str, sorted(plan.instances)))} (one onnxruntime thread each; the "
        f"batch sweep and the targets at {plan.default_instances}); the limit runs as many "
        f"worker processes with the same session settings. {plan.in_flight} requests in "
        f"flight per client; {plan.repeats} interleaved repeats per path and point.",
        f"- **Shared machine**: other processes used {cores['limit'][1]:.2f} cores on average "
        f"during the limit's measurements and {cores['service'][1]:.2f} during the service's "
        f"(load average {header['load_average_before'][0]} before, "
        f"{header['load_average_after'][0]} after). On average the limit got "
        f"{cores['limit'][0]:.2f} cores and the service {cores['service'][0]:.2f}. The "
        "per-CPU-second ratio (data seconds per CPU second of each path) does not depend on "
        "the load. A target is judged with the service's median repeat against the best "
        "repeat of the limit (or naive or whole-window path) measured at that batch size "
        "anywhere in the run, "
        "and counts as met only if both ratios meet it: a target met only by noise is not "
        "met.",
    ]


def _definition_lines(plan) -> list[str]:
    """RESULTS.md's paragraphs defining the workloads and the paths measured."""
    return [
        "Workloads (`bench/workloads.py`), each a campaign config of its mode with seeded "
        "weights: **toy** = classifier mode (H1+L1, 2048 Hz, 4 s windows at 4 Hz, the "
        "campaign's padded CNN); **deepclean** = 21 witnesses, 2048 Hz, 1 s windows at 32 Hz; "
        "**o3-deepclean** = O3 reprocessing's DeepClean (`workflow/o3-month-deepclean.toml`: "
        "21 witnesses of H1 streamed at 4096 Hz, the strain subtracted in the merge, 1 s "
        "windows at 32 Hz, batch 32; a reduced span per measurement on the CPU); "
        "**bbhnet** = H1+L1, 2048 Hz, 1.5 s windows at 4 Hz; **aframe** = the same at "
        "aframe's geometry, 1.5 s windows at 16 Hz (kernel/stride 24); **e2e** = H1+L1 with "
        "21 witnesses each, 2048 Hz, 1 s windows at 32 Hz (DeepClean → subtraction → BBHnet). "
        + _streamed_sentence(plan.workloads),
        "",
        "Paths: **limit** = the mode's graphs in-process with onnxruntime over every window "
        "of the span, batch by batch (`pipeline.mode_stream`: the streamed graphs where the "
        "workload streams, else the windows, whole-window networks, DeepClean's online "
        "average, subtraction), the best a user's own loop does; "
        "**service** = the campaign path: the repository `offline-iaas export` writes (one "
        "fused model per mode), served by tritonserver as `serve` starts it, k client "
        "processes streaming batched snapshot updates through the campaign client's "
        "`RequestStream` (gRPC stream, sequence IDs, START/END); **naive** = whole windows per "
        "request to the network model of the `export --ensemble` repository (single-network "
        "modes; the DeepClean client averages itself); **whole-window** = a streamed "
        "workload's weights served with `model.streamed = false` (snapshotter and whole-window "
        "graphs, the service's clients): what a whole-window server does, the peer's path; "
        "**whole-window limit** = those graphs in-process, as the limit runs its own. "
        "Throughput is data seconds per wall second.",
    ]


def _device_text(header: dict, machine: dict) -> str:
    if header.get("device", "cpu") == "cuda":
        return (f"**GPU: {machine.get('gpu', 'unknown')}**: the gpu flavor, networks on CUDA "
                "(the limit's too).")
    return "**No GPU**: the cpu flavor, networks on onnxruntime's CPU provider."


def _gpu_lines(header: dict) -> list[str]:
    if header.get("device", "cpu") == "cuda":
        return ["These numbers are the gpu flavor's (`--device cuda`): the fused model of every "
                "mode with its networks on the GPU named above."]
    return ["This run used the CPU (`--device cpu`). The same command with `--device cuda` on a "
            "GPU node measures the gpu flavor's repositories (see `GPU.md`). The published mark "
            "to beat is about 5,000 s of DeepClean data per second per GPU."]
