"""The foreground's cost (``bbhnet.inject``) beside the background's, measured in one run.

``python -m offline_iaas.bench.foreground --out benchmarks/FOREGROUND.md`` (issue #41).

The ``bbhnet`` workload's campaign over one stretch, split between the clients as ``make-dag``
splits it (``stretches.client_shares``), served by the fused model on one tritonserver:

background
    Each client streams its piece (warm-up and share) under the piece's sequence ID, as the
    campaign's client does, over synthetic noise.
foreground
    Then each client streams its share's foreground pieces (``data.foreground``: the windows an
    injection's statistic is found in, each after the stretch's warm-up, nearby ones merged)
    on one request stream, each piece under its own sequence ID, with the injections' signals
    added to its strain (``data.onthefly.OnTheFly``: the waveforms are made and projected in
    the client, as in a campaign). The injections are one per ``interval`` seconds of data
    (at ``interval (j + 1/2) + 0.1`` s from the stretch's start: off the window grid) drawn
    from the ``[synth]`` population.

What a campaign client does besides (frames in, checkpoints out) is left out, as in the
service path, and so is loading lalsimulation (once per client, before the clients start).
Printed: wall and CPU seconds (clients and server) of each, per analysed data second, and the
foreground's over the background's, with the windows each streamed and what
``stretches.foreground_windows_per_second`` expects.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bench.clients import ClientJob, ClientRun, run_clients
from offline_iaas.bench.provenance import source_commit
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import open_stream, stream_updates
from offline_iaas.bench.workloads import BBHNET, Workload, write_weights
from offline_iaas.config import CampaignConfig
from offline_iaas.data.foreground import share_foreground
from offline_iaas.data.injection_set import InjectionSet
from offline_iaas.data.onthefly import OnTheFly
from offline_iaas.data.population import draw_binaries, population_spec
from offline_iaas.repository.export import export_repository, read_manifest
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import (
    client_shares,
    foreground_windows_per_second,
    request_sizes,
    whole_span,
)

INTERVAL_SECONDS = 30.0
DATA_SECONDS = 1200.0
CLIENTS = 2
IN_FLIGHT = 2
OFF_GRID_SECONDS = 0.1


@dataclass(frozen=True)
class ForegroundJob(ClientJob):
    """A client's foreground: its pieces as ``(first sample, samples, sequence ID)`` into the
    samples of its share (from its piece's first window, at ``gps_start``)."""

    pieces: tuple[tuple[int, int, int], ...] = ()
    injections: InjectionSet | None = None
    strain_channels: tuple[str, ...] = ()
    gps_start: float = 0.0
    grid_gps_start: float = 0.0

    def open(self) -> object:
        """Connect, and load lalsimulation before the start signal: a client loads it once
        (0.1 s), whatever its share's length, so it is no cost per analysed second."""
        from offline_iaas.data.waveforms import check_approximant

        check_approximant(self.injections.approximant)
        return super().open()


def stream_foreground(client, job: ForegroundJob, samples: np.ndarray) -> int:
    """Stream the foreground pieces on one request stream, the injections added; return the
    windows answered."""
    inject = OnTheFly(job.injections, job.strain_channels, job.grid_gps_start)
    rate, stride = job.load.sample_rate_hz, job.load.stride_samples

    def read(request_id: str, result) -> None:
        for name in job.outputs:
            result.as_numpy(name)

    windows = 0
    with open_stream(client, job, read) as stream:
        for first, count, sequence_id in job.pieces:
            piece = samples[:, first : first + count].copy()
            gps = job.gps_start + first / rate
            for row, channel in enumerate(job.strain_channels):
                piece[row] = inject.add(channel, gps, rate, piece[row])
            sizes = request_sizes(count // stride, job.batch_size)
            at = 0
            for index, size in enumerate(sizes):
                stream.send("update", piece[None, :, at : at + size * stride],
                            f"{sequence_id}:{index}", sequence_id, start=index == 0,
                            end=index == len(sizes) - 1)
                at += size * stride
            windows += count // stride
        stream.drain()
    return windows


def injection_set(config: CampaignConfig, interval_seconds: float, seed: int = 0
                  ) -> InjectionSet:
    """One binary of the ``[synth]`` population per ``interval_seconds`` of the span."""
    spec = population_spec(config.synth, config.source)
    count = int(config.data.duration // interval_seconds)
    times = config.data.start + interval_seconds * (np.arange(count) + 0.5) + OFF_GRID_SECONDS
    binaries = draw_binaries(spec, count, np.random.default_rng(seed))
    return InjectionSet(
        binaries=tuple(dataclasses.replace(b, gps_time=float(t))
                       for b, t in zip(binaries, times, strict=True)),
        approximant=spec.approximant, f_lower_hz=spec.f_lower_hz)


@dataclass(frozen=True)
class Cost:
    """One stream's measurement (``name``: background or foreground)."""

    name: str
    windows: int
    """Windows streamed (warm-ups included)."""
    run: ClientRun

    @property
    def cpu_seconds(self) -> float:
        return self.run.client_cpu_seconds + self.run.server_cpu_seconds

    @property
    def other_cpu_seconds(self) -> float:
        return max(0.0, self.run.machine_busy_seconds - self.cpu_seconds)


def measure_foreground(work_dir: Path, load: Workload = BBHNET,
                       data_seconds: float = DATA_SECONDS, clients: int = CLIENTS,
                       interval_seconds: float = INTERVAL_SECONDS, slides: int = 0
                       ) -> tuple[CampaignConfig, list[Cost]]:
    """The background, then the foreground, on one server (module docstring); with
    ``slides`` of 1 s formed on the server (``bbhnet.slides``)."""
    config = load.config(work_dir / "repository", instances=clients, clients=clients)
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, duration=data_seconds),
        bbhnet=dataclasses.replace(config.bbhnet, slides=slides, slide_seconds=1.0))
    export_repository(config, write_weights(load, work_dir / "weights"))
    injections = injection_set(config, interval_seconds)
    times = [b.gps_time for b in injections.binaries]
    [stretch] = whole_span(config)
    stride, step = config.stride_samples, config.stride_seconds
    jobs, foreground = [], []
    for share in client_shares(config, [stretch]):
        [piece] = share.pieces
        base = ClientJob(
            model=config.model.name, outputs=config.outputs.names, url="", headers={},
            load=load, data_seconds=piece.windows * step, batch_size=config.model.batch_size,
            in_flight=IN_FLIGHT, sequence_id=piece.sequence_id, seed=share.index)
        jobs.append(base)
        owned = share_foreground(config, share, times)
        end = max([p.output_stop for p in owned], default=piece.output_stop)
        foreground.append(ForegroundJob(
            **{**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
               "data_seconds": (end - piece.first_window) * step},
            pieces=tuple(((p.first_window - piece.first_window) * stride, p.windows * stride,
                          p.sequence_id) for p in owned),
            injections=injections, strain_channels=tuple(config.data.channels),
            gps_start=piece.gps_start, grid_gps_start=config.data.start))
    repo = config.model.repository
    costs = []
    with bench_server(repo, RunDir(work_dir / "run"), list(read_manifest(repo).models)) as srv:
        for name, group, streamer in (("background", jobs, stream_updates),
                                      ("foreground", foreground, stream_foreground)):
            placed = [dataclasses.replace(j, url=srv.url, headers=srv.headers) for j in group]
            run = run_clients(placed, streamer, srv.cpu_seconds, srv.ports.grpc)
            costs.append(Cost(name, run.windows, run))
    return config, costs


def markdown(config: CampaignConfig, costs: list[Cost], load: Workload,
             interval_seconds: float, command: str) -> str:
    """The table and the ratios."""
    background, foreground = costs
    step = config.stride_seconds
    analysed = whole_span(config)[0].kept_windows(config) * step
    injections = int(config.data.duration // interval_seconds)
    rows = [
        "| stream | windows streamed | wall s | client CPU s | server CPU s "
        "| other processes' CPU s | wall s / analysed s | CPU s / analysed s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in costs:
        rows.append(f"| {c.name} | {c.windows:,} | {c.run.wall_seconds:.1f} | "
                    f"{c.run.client_cpu_seconds:.1f} | {c.run.server_cpu_seconds:.1f} | "
                    f"{c.other_cpu_seconds:.1f} | {c.run.wall_seconds / analysed:.4f} | "
                    f"{c.cpu_seconds / analysed:.4f} |")
    expected = foreground_windows_per_second(config, 1 / interval_seconds,
                                             config.bbhnet.found_seconds, evenly_spaced=True)
    cpu_ratio = foreground.cpu_seconds / background.cpu_seconds
    return "\n".join([
        "# The foreground's cost beside the background's (injections on the fly)",
        "",
        f"Workload `{load.name}` ({len(load.ifos)} detectors at {load.sample_rate_hz:g} Hz, "
        f"{load.kernel_seconds:g} s windows at {load.inference_rate_hz:g} Hz, batch "
        f"{config.model.batch_size}, {config.bbhnet.slides or 'no'} slides), the fused model "
        f"on one tritonserver, "
        f"{len(foreground.run.reports)} clients, {analysed:,.0f} analysed data seconds (one "
        f"stretch); {injections} injections, one per {interval_seconds:g} s, added on the fly "
        f"in the clients (found window +-{config.bbhnet.found_seconds:g} s, warm-up "
        f"{config.stretch_warmup_windows} windows).",
        "",
        *rows,
        "",
        f"- foreground over background, CPU (clients and server) per analysed second: "
        f"{cpu_ratio:.1%} (at most 30 % wanted); wall: "
        f"{foreground.run.wall_seconds / background.run.wall_seconds:.1%}",
        f"- windows streamed, foreground over background: "
        f"{foreground.windows / background.windows:.1%}; expected "
        f"(`stretches.foreground_windows_per_second`): {expected:.3f} windows per analysed "
        f"second against the background's {1 / step:g}, {expected * step:.1%}",
        f"- client CPU: background {background.run.client_cpu_seconds:.1f} s, foreground "
        f"{foreground.run.client_cpu_seconds:.1f} s (the waveforms made and added there)",
        "",
        "The two streams run one after the other on the same server: where other processes "
        "took CPU during one of them (their column), its wall time shows that machine's load "
        "more than the stream; CPU seconds per analysed second do not.",
        "",
        f"Command: `{command}` at commit `{source_commit()}`.",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-seconds", type=float, default=DATA_SECONDS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--interval-seconds", type=float, default=INTERVAL_SECONDS)
    parser.add_argument("--slides", type=int, default=0,
                        help="time slides of 1 s formed on the server (bbhnet.slides)")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offline-iaas-foreground-") as tmp:
        config, costs = measure_foreground(Path(tmp), BBHNET, args.data_seconds, args.clients,
                                           args.interval_seconds, args.slides)
    command = " ".join(["python -m offline_iaas.bench.foreground", *(argv or sys.argv[1:])])
    text = markdown(config, costs, BBHNET, args.interval_seconds, command)
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
