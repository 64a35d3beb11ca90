"""Tables, plots and ``RESULTS.md`` from the bench's measurements.

Each path at each point is represented by its best repeat in data seconds per wall second,
and by its cheapest repeat in data seconds per CPU second (client and server processes, or the
limit's workers; other processes can only add to that cost). Ratios are taken between those:
``service/limit`` and ``service/naive`` per wall second, and the same per CPU second, which
the load other processes put on the machine hardly moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offline_iaas.bench.results import Measurement, best_by_path, cpu_efficiency_by_path
from offline_iaas.bench.sweep import SweepPlan
from offline_iaas.bench.workloads import workload

PATHS: tuple[str, ...] = ("limit", "service", "naive")
BYTES_TARGET_FACTOR = 1.1
TARGETS: dict[str, dict[str, float]] = {
    "deepclean": {"service/limit": 0.85, "service/naive": 1.5},
    "bbhnet": {"service/limit": 0.85},
    "e2e": {"service/limit": 0.85},
}
"""Issue #14's targets (2 cores, no GPU), judged at each workload's default point; every
workload's service also sends at most ``BYTES_TARGET_FACTOR`` x its raw channel bytes."""


@dataclass(frozen=True)
class Point:
    """The best measurement of each path at one sweep point of one workload."""

    workload: str
    batch_size: int
    clients: int
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
    """Group measurements by (workload, batch size, clients), in order of first appearance."""
    groups: dict[tuple[str, int, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.workload, m.batch_size, m.clients), []).append(m)
    return [
        Point(name, batch, clients, best_by_path(group), cpu_efficiency_by_path(group))
        for (name, batch, clients), group in groups.items()
    ]


def _fmt(value: float, digits: int = 2) -> str:
    return "—" if value != value else f"{value:.{digits}f}"


def throughput_table(pts: list[Point]) -> str:
    """Markdown table: data seconds per wall second of each path and the ratios."""
    lines = [
        "| workload | batch | clients | limit | service | naive "
        "| service/limit | service/naive | service/limit per CPU s | service/naive per CPU s "
        "| cores used: limit, service | other load (cores): limit, service |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for p in pts:
        rate = {k: _fmt(m.data_seconds_per_second, 1) for k, m in p.best.items()}
        cores = {k: _fmt(m.cpu_seconds / m.wall_seconds, 2) for k, m in p.best.items()}
        other = {k: _fmt(m.other_cpu_seconds / m.wall_seconds, 1) for k, m in p.best.items()}
        lines.append(
            f"| {p.workload} | {p.batch_size} | {p.clients} | {rate.get('limit', '—')} | "
            f"{rate.get('service', '—')} | {rate.get('naive', '—')} | "
            f"{_fmt(p.ratio('service', 'limit'))} | "
            f"{_fmt(p.ratio('service', 'naive'))} | {_fmt(p.cpu_ratio('service', 'limit'))} | "
            f"{_fmt(p.cpu_ratio('service', 'naive'))} | "
            f"{cores.get('limit', '—')}, {cores.get('service', '—')} | "
            f"{other.get('limit', '—')}, {other.get('service', '—')} |"
        )
    return "\n".join(lines)


def cost_table(pts: list[Point]) -> str:
    """Markdown table: bytes and CPU time per data second of each served path."""
    lines = [
        "| workload | batch | clients | path | sent (B/data-s) | received (B/data-s) "
        "| client CPU (ms/data-s) | server CPU (ms/data-s) | least CPU of the repeats "
        "(ms/data-s) |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in pts:
        for path in PATHS:
            m = p.best.get(path)
            if m is None:
                continue
            lines.append(
                f"| {p.workload} | {p.batch_size} | {p.clients} | {path} | "
                f"{m.bytes_sent_per_data_second:,.0f} | {m.bytes_received_per_data_second:,.0f} "
                f"| {1e3 * m.client_cpu_seconds / m.data_seconds:.2f} | "
                f"{1e3 * m.server_cpu_seconds / m.data_seconds:.2f} | "
                f"{1e3 / p.per_cpu[path]:.2f} |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class TargetCheck:
    """One target of the issue, judged at one point."""

    workload: str
    name: str
    value: float
    cpu_value: float
    """The same ratio per CPU second (NaN where it does not apply)."""
    threshold: float
    lower_is_better: bool = False

    @property
    def met(self) -> bool:
        """Met per wall second, and per CPU second where that applies (both must hold)."""
        if self.lower_is_better:
            return self.value <= self.threshold
        return self.value >= self.threshold and not self.cpu_value < self.threshold


def _checks_at(p: Point) -> list[TargetCheck]:
    """The issue's targets evaluated at one point (none without a service measurement)."""
    if "service" not in p.best:
        return []
    checks = []
    for name, threshold in TARGETS.get(p.workload, {}).items():
        bottom = name.split("/")[1]
        checks.append(TargetCheck(
            p.workload, name, p.ratio("service", bottom), p.cpu_ratio("service", bottom),
            threshold,
        ))
    load = workload(p.workload)
    checks.append(TargetCheck(
        p.workload, "sent bytes / (channels x rate x 4 B)",
        p.best["service"].bytes_sent_per_data_second / load.input_bytes_per_data_second,
        float("nan"), BYTES_TARGET_FACTOR, lower_is_better=True,
    ))
    return checks


def _is_default(p: Point, plan: SweepPlan) -> bool:
    """``p`` is its workload's default point (where the targets are judged)."""
    return (p.batch_size, p.clients) == (
        plan.batch_size_of(workload(p.workload)), plan.default_clients)


def target_checks(pts: list[Point], plan: SweepPlan) -> list[TargetCheck]:
    """The issue's targets at each workload's default point."""
    return [c for p in pts if _is_default(p, plan) for c in _checks_at(p)]


def targets_table(pts: list[Point], plan: SweepPlan) -> str:
    """The targets at the default point, and at how many sweep points each is met."""
    met_at: dict[tuple[str, str], list[bool]] = {}
    for p in pts:
        for c in _checks_at(p):
            met_at.setdefault((c.workload, c.name), []).append(c.met)
    lines = [
        "| workload | quantity | per wall s | per CPU s | target | met (both) "
        "| met at sweep points |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for c in target_checks(pts, plan):
        sign = "≤" if c.lower_is_better else "≥"
        flags = met_at[(c.workload, c.name)]
        lines.append(
            f"| {c.workload} | {c.name} | {_fmt(c.value, 3)} | {_fmt(c.cpu_value, 3)} | "
            f"{sign} {c.threshold:g} | {'yes' if c.met else '**no**'} | "
            f"{sum(flags)} of {len(flags)} |"
        )
    return "\n".join(lines)


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
    styles = {"limit": "k--", "service": "C0-o", "naive": "C3-s"}
    clients = plan.default_clients
    for row, name in enumerate(names):
        mine = [p for p in pts if p.workload == name]
        batch_size = plan.batch_size_of(workload(name))
        sweeps = (
            ("batch size (windows per request)", "batch_size",
             [p for p in mine if p.clients == clients], f"{clients} clients"),
            ("clients (k)", "clients",
             [p for p in mine if p.batch_size == batch_size], f"batch {batch_size}"),
        )
        for col, (xlabel, attr, chosen, fixed) in enumerate(sweeps):
            axis = axes[row][col]
            chosen = sorted(chosen, key=lambda p: getattr(p, attr))
            for path, style in styles.items():
                xy = [(getattr(p, attr), p.best[path].data_seconds_per_second)
                      for p in chosen if path in p.best]
                if xy:
                    xs, ys = zip(*xy, strict=True)
                    axis.plot(xs, ys, style, label=path)
            if attr == "batch_size":
                axis.set_xscale("log", base=2)
            axis.set_xticks(sorted({getattr(p, attr) for p in chosen}))
            axis.set_xticklabels([str(v) for v in sorted({getattr(p, attr) for p in chosen})])
            axis.set_xlabel(xlabel)
            axis.set_ylabel("data seconds / wall second")
            axis.set_title(f"{name} ({fixed})")
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=8)
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


def results_markdown(header: dict, measurements: list[Measurement], plan) -> str:
    """The text of ``RESULTS.md``."""
    pts = points(measurements)
    machine = header["machine"]
    cores = {path: _mean_cores(measurements, path) for path in ("limit", "service")}
    checks = target_checks(pts, plan)
    met = sum(c.met for c in checks)
    defaults = ", ".join(
        f"{name} batch {plan.batch_size_of(workload(name))}" for name in plan.workloads
    )
    parts = [
        "# Throughput: the campaign's served model against its limit and the naive baseline",
        "",
        "Generated by `offline-iaas bench`; do not edit by hand (see `NOTES.md` for the "
        "attempts and their analysis).",
        "",
        f"- **Command**: `{header['command']}` — took {header['elapsed_seconds']:.0f} s, "
        f"started {header['started']}.",
        f"- **Machine**: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, Linux {machine['kernel']}, Python {machine['python']}, "
        f"onnxruntime {machine['onnxruntime']}, tritonserver from nvidia-pytriton "
        f"{machine['nvidia-pytriton']} (python backend). " + _device_text(header, machine),
        f"- **Layout**: the server runs the workload's repository as `offline-iaas export` "
        f"writes it, with `server.instances = {plan.instances}` (one onnxruntime thread "
        f"each); the limit runs {plan.instances} worker process(es) with the same session "
        f"settings. {plan.in_flight} requests in flight per client; best of {plan.repeats} "
        "interleaved repeats per path and point.",
        f"- **Shared machine**: other processes used {cores['limit'][1]:.2f} cores on average "
        f"during the limit's measurements and {cores['service'][1]:.2f} during the service's "
        f"(load average {header['load_average_before'][0]} before, "
        f"{header['load_average_after'][0]} after). On average the limit got "
        f"{cores['limit'][0]:.2f} cores and the service {cores['service'][0]:.2f}. The "
        "per-CPU-second ratio (data seconds per CPU second of each path) does not depend on "
        "the load, and a target counts as met only if both ratios meet it.",
        "",
        "Workloads (`bench/workloads.py`), each a campaign config of its mode with seeded "
        "weights: **toy** = classifier mode (H1+L1, 2048 Hz, 4 s windows at 4 Hz, the "
        "campaign's padded CNN); **deepclean** = 21 witnesses, 2048 Hz, 1 s windows at 32 Hz; "
        "**bbhnet** = H1+L1, 2048 Hz, 1.5 s windows at 4 Hz; **e2e** = H1+L1 with 21 "
        "witnesses each, 2048 Hz, 1 s windows at 32 Hz (DeepClean → subtraction → BBHnet). "
        "None of these networks streams (all are padded or see whole windows), so there is no "
        "streaming limit.",
        "",
        "Paths: **limit** = the mode's whole-window graphs in-process with onnxruntime over "
        "every window of the span, batch by batch (windows, networks, DeepClean's online "
        "average, subtraction: `pipeline.mode_stream`), what a user's own loop does; "
        "**service** = the campaign path: the repository `offline-iaas export` writes (one "
        "fused model per mode), served by tritonserver as `serve` starts it, k client "
        "processes streaming batched snapshot updates through the campaign client's "
        "`RequestStream` (gRPC stream, sequence IDs, START/END); **naive** = whole windows per "
        "request to the network model of the `export --ensemble` repository (single-network "
        "modes; the DeepClean client averages itself). Throughput is data seconds per wall "
        "second.",
        "",
        f"## Targets (default points: {defaults}; {plan.default_clients} clients) — {met} of "
        f"{len(checks)} met",
        "",
        targets_table(pts, plan),
        "",
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
        " takes the service throughput measured here for the workload of the campaign's mode.",
        "",
        "## GPU",
        "",
        *_gpu_lines(header),
        "",
    ]
    return "\n".join(parts)


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
