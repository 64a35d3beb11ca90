"""The foreground's cost (``search.inject``): a campaign's clients with and without it.

``python -m offline_iaas.bench.foreground --out benchmarks/FOREGROUND.md`` (issue #41).

The ``bbhnet`` workload's campaign over one stretch of clean synthetic frames (``synth``,
written by the bench: GWF at ``--frame-rate`` in files of ``--file-seconds``), split between
the clients as ``make-dag`` splits it (``stretches.client_shares``), served by the fused model on
one tritonserver. Each client does with its share what the campaign's client does
(``client/requests.request_inputs``: the frames read in the frame reader process, resampled to
the model rate, cut into requests, streamed under each piece's sequence ID), twice on the same
server:

background only
    the share's pieces, as a campaign without ``search.inject``;
with the foreground
    the same pieces, their reads also cutting the foreground's samples
    (``data.frames.ForegroundCapture``: the waveforms made and added in the client), then the
    share's foreground pieces (``search.foreground``: each injection's found windows after the
    stretch's warm-up), each under its own sequence ID. The injections are one per
    ``interval`` seconds of data (at ``interval (j + 1/2) + 0.1`` s from the stretch's start:
    off the window grid) drawn from the ``[synth]`` population.

The foreground's cost is the difference, per analysed data second. CPU counts the clients with
their frame reader processes, and the server; lalsimulation's loading and the frame reader's
start (once per client, whatever its share's length) happen before the start signal. Repeats
alternate which of the two runs first.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.bench.clients import ClientJob, ClientRun, run_clients
from offline_iaas.bench.provenance import command_line, publish
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import open_stream
from offline_iaas.bench.timeslides import SLIDE_SECONDS
from offline_iaas.bench.workloads import BBHNET, Workload, write_weights
from offline_iaas.client.requests import foreground_capture, request_inputs
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.frames import read_span
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.manifest import read_manifest
from offline_iaas.records import ClientShare, Piece
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.search.foreground import share_foreground
from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.onthefly import OnTheFly
from offline_iaas.search.population import draw_binaries, population_spec
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
FRAME_RATE_HZ = 2048.0
FILE_SECONDS = 64.0
REPEATS = 2


@dataclass(frozen=True)
class ShareJob(ClientJob):
    """A campaign client's share, streamed from frames; ``foreground``: its foreground pieces
    (none: the background only)."""

    config: CampaignConfig | None = None
    share: ClientShare | None = None
    foreground: tuple[Piece, ...] = ()
    injections: InjectionSet | None = None
    read_again: bool = False
    """The foreground pieces read from the frames again (the baseline: no capture)."""

    def open(self) -> object:
        """Connect; load lalsimulation and start the frame reader (one read of a stride)
        before the start signal: a client does both once, whatever its share's length."""
        from offline_iaas.search.waveforms import check_approximant

        check_approximant(self.injections.approximant)
        piece = self.share.pieces[0]
        read_span(discover_frames(self.config.data), self.config.stream_channels, piece.gps_start,
                  piece.gps_start + self.config.stride_seconds, self.config.data.sample_rate,
                  (piece.stretch_gps_start, piece.stretch_gps_end))
        return super().open()


def stream_share(client, job: ShareJob, samples: np.ndarray) -> int:
    """Stream the share's pieces from its frames, then its foreground pieces with the
    injections added, as the campaign's client does; return the windows answered."""
    config = job.config
    frames = discover_frames(config.data)
    inject = (OnTheFly(job.injections, tuple(config.data.channels), config.data.start)
              if job.foreground else None)
    capture = None if job.read_again else foreground_capture(config, job.foreground, inject)
    windows = 0
    streams = [*((p, None) for p in job.share.pieces), *((p, inject) for p in job.foreground)]
    with open_stream(client, job) as stream:
        for piece, added in streams:
            sizes = request_sizes(piece.windows, config.model.batch_size)
            requests = request_inputs(config, frames, piece, 0, sizes, added, capture)
            for _ in stream.send_piece(requests, len(sizes), str(piece.sequence_id),
                                       piece.sequence_id):
                pass
            windows += piece.windows
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
    """One run's measurement (``name``: background only, or with the foreground)."""

    name: str
    windows: int
    """Windows streamed (warm-ups included)."""
    run: ClientRun


BACKGROUND, WITH_FOREGROUND = "background only", "with the foreground"


def bench_config(work_dir: Path, load: Workload, data_seconds: float, clients: int,
                 slides: int, frame_rate_hz: float, file_seconds: float) -> CampaignConfig:
    """The workload's campaign over ``data_seconds`` of clean frames in ``work_dir/frames``."""
    # the campaigns' default (model.streamed = false): what FOREGROUND.md measures
    config = load.config(work_dir / "repository", instances=clients, clients=clients,
                         streamed=False)
    return dataclasses.replace(
        config,
        data=dataclasses.replace(config.data, duration=data_seconds,
                                 frames=work_dir / "frames"),
        synth=dataclasses.replace(config.synth, injections=0, witnesses=0,
                                  frame_sample_rate=frame_rate_hz, file_duration=file_seconds),
        search=dataclasses.replace(config.search, slides=slides,
                                   slide_seconds=SLIDE_SECONDS))


def measure_foreground(work_dir: Path, load: Workload = BBHNET,
                       data_seconds: float = DATA_SECONDS, clients: int = CLIENTS,
                       interval_seconds: float = INTERVAL_SECONDS, slides: int = 0,
                       frame_rate_hz: float = FRAME_RATE_HZ,
                       file_seconds: float = FILE_SECONDS, repeats: int = REPEATS,
                       read_again: bool = False,
                       ) -> tuple[CampaignConfig, list[tuple[Cost, Cost]]]:
    """Per repeat, the background only and with the foreground on one server (module
    docstring); with ``slides`` of ``SLIDE_SECONDS`` formed on the server (``search.slides``);
    ``read_again``: the foreground pieces read from the frames again (the baseline)."""
    config = bench_config(work_dir, load, data_seconds, clients, slides, frame_rate_hz,
                          file_seconds)
    write_synthetic_dataset(config)
    export_repository(config, write_weights(load, work_dir / "weights"))
    injections = injection_set(config, interval_seconds)
    times = [b.gps_time for b in injections.binaries]
    [stretch] = whole_span(config)
    runs: dict[str, list[ShareJob]] = {BACKGROUND: [], WITH_FOREGROUND: []}
    for share in client_shares(config, [stretch]):
        # data_seconds: the worker's synthetic samples, unused (the share is read from frames)
        job = ShareJob(
            model=config.model.name, outputs=config.outputs.names, url="", headers={},
            load=load, data_seconds=config.stride_seconds, batch_size=config.model.batch_size,
            in_flight=IN_FLIGHT, sequence_id=share.pieces[0].sequence_id, seed=share.index,
            config=config, share=share, injections=injections, read_again=read_again)
        runs[BACKGROUND].append(job)
        runs[WITH_FOREGROUND].append(dataclasses.replace(
            job, foreground=tuple(share_foreground(config.geometry, config.search, share, times))))
    repo = config.model.repository
    measured = []
    with bench_server(repo, RunDir(work_dir / "run"), list(read_manifest(repo).models)) as srv:
        for repeat in range(repeats):
            order = [BACKGROUND, WITH_FOREGROUND][:: 1 if repeat % 2 == 0 else -1]
            costs = {}
            for name in order:
                placed = [dataclasses.replace(j, url=srv.url, headers=srv.headers)
                          for j in runs[name]]
                run = run_clients(placed, stream_share, srv.cpu_seconds, srv.ports.grpc)
                costs[name] = Cost(name, run.windows, run)
            measured.append((costs[BACKGROUND], costs[WITH_FOREGROUND]))
    return config, measured


def foreground_ratios(pair: tuple[Cost, Cost]) -> tuple[float, float]:
    """The foreground's CPU and wall over the background's: (with - without) / without."""
    background, both = pair
    return (both.run.cpu_seconds / background.run.cpu_seconds - 1,
            both.run.wall_seconds / background.run.wall_seconds - 1)


def markdown(config: CampaignConfig, measured: list[tuple[Cost, Cost]], load: Workload,
             interval_seconds: float, read_again: bool = False) -> str:
    """The table and the ratios."""
    step = config.stride_seconds
    analysed = whole_span(config)[0].kept_windows(config.geometry) * step
    injections = int(config.data.duration // interval_seconds)
    rows = [
        "| repeat | run | windows streamed | wall s | client CPU s (with frame readers) "
        "| server CPU s | other processes' CPU s | wall s / analysed s | CPU s / analysed s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for repeat, pair in enumerate(measured, start=1):
        for c in pair:
            rows.append(f"| {repeat} | {c.name} | {c.windows:,} | {c.run.wall_seconds:.1f} | "
                        f"{c.run.client_cpu_seconds:.1f} | {c.run.server_cpu_seconds:.1f} | "
                        f"{c.run.other_cpu_seconds:.1f} | {c.run.wall_seconds / analysed:.4f} | "
                        f"{c.run.cpu_seconds / analysed:.4f} |")
    ratios = [foreground_ratios(pair) for pair in measured]
    cpu = [r[0] for r in ratios]
    wall = [r[1] for r in ratios]
    pooled_cpu = (sum(both.run.cpu_seconds for _, both in measured)
                  / sum(background.run.cpu_seconds for background, _ in measured) - 1)
    background, both = measured[0]
    expected = foreground_windows_per_second(config.geometry, 1 / interval_seconds,
                                             config.search.found_seconds, evenly_spaced=True)
    extra_windows = both.windows - background.windows
    return "\n".join([
        "# The foreground's cost beside the background's (injections on the fly)",
        "",
        f"Workload `{load.name}` ({len(load.ifos)} detectors, frames at "
        f"{config.synth.frame_sample_rate:g} Hz in {config.synth.file_duration:g} s GWF files "
        f"read and resampled to {load.sample_rate_hz:g} Hz, {load.kernel_seconds:g} s windows "
        f"at {load.inference_rate_hz:g} Hz, batch {config.model.batch_size}, "
        f"{config.search.slides or 'no'} slides), the fused model on one tritonserver, "
        + ("the foreground pieces read from the frames again (`--read-again`: the baseline), "
           if read_again else "")
        + f"{len(background.run.reports)} clients, {analysed:,.0f} analysed data seconds (one "
        f"stretch); {injections} injections, one per {interval_seconds:g} s, added on the fly "
        f"in the clients (found window +-{config.search.found_seconds:g} s, warm-up "
        f"{config.stretch_warmup_windows} windows).",
        "",
        *rows,
        "",
        "- the foreground (with it less without it) over the background, CPU (clients, their "
        "frame readers and the server) per analysed second: "
        + ", ".join(f"{r:.1%}" for r in cpu)
        + f" (median {statistics.median(cpu):.1%}; over all repeats' CPU together "
        f"{pooled_cpu:.1%}; at most 30 % wanted); wall: "
        + ", ".join(f"{r:.1%}" for r in wall),
        f"- windows the foreground streams over the background's: {extra_windows:,} / "
        f"{background.windows:,} = {extra_windows / background.windows:.1%}; expected "
        f"(`stretches.foreground_windows_per_second`): {expected:.3f} windows per analysed "
        f"second against the background's {1 / step:g}, {expected * step:.1%}",
        "",
        "Where other processes took CPU during a run (their column), its wall time shows that "
        "machine's load more than the run; CPU seconds per analysed second do not.",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-seconds", type=float, default=DATA_SECONDS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--interval-seconds", type=float, default=INTERVAL_SECONDS)
    parser.add_argument("--slides", type=int, default=0,
                        help="time slides of SLIDE_SECONDS formed on the server (search.slides)")
    parser.add_argument("--frame-rate", type=float, default=FRAME_RATE_HZ,
                        help="the frames' sample rate (Hz): a multiple of the model's 2048")
    parser.add_argument("--file-seconds", type=float, default=FILE_SECONDS,
                        help="length of each GWF file (s)")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--read-again", action="store_true",
                        help="the baseline: the foreground pieces read from the frames again "
                             "instead of cut from the background's reads")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offline-iaas-foreground-") as tmp:
        config, measured = measure_foreground(
            Path(tmp), BBHNET, args.data_seconds, args.clients, args.interval_seconds,
            args.slides, args.frame_rate, args.file_seconds, args.repeats, args.read_again)
    publish(markdown(config, measured, BBHNET, args.interval_seconds, args.read_again),
            command_line("offline_iaas.bench.foreground", argv), args.out)


if __name__ == "__main__":
    main()
