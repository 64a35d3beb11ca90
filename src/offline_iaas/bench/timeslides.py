"""Time slides formed on the server against the client-side approach, measured in one run.

``python -m offline_iaas.bench.timeslides --out benchmarks/TIMESLIDES.md`` (issue #17).

Both paths produce the same network windows over one stretch split between the clients as
the campaign splits it: BBHnet on every kept window at zero lag, and at each of ``N`` slides of
the second detector (``search.slide_seconds`` apart) on the kept windows where that slide is formed
(both windows kept windows of the stretch: slide ``k`` from ``k * slide_seconds`` after the
stretch's first kept window), over the same synthetic data, with the same clients, batch size
and in-flight depth, each against its own tritonserver, both serving the networks streamed
layer by layer (the workload's ``model.streamed``: what campaigns serve under ``auto``).

server
    The campaign's path: the fused model exported with ``search.slides = N`` (each slide a
    stream of the layers on the detectors' samples whitened once: ``StreamedTimeSlides``).
    Each client streams its piece once under one sequence ID: the first piece from the
    stretch's start (its warm-up, then its share), every other one preceded by the warm-up
    and the longest slide's history (``N * slide_seconds``, clipped at the stretch's start).
client-side
    What a client does when the server cannot slide (the field's search re-streams the data
    per slide): the same model exported without slides; each client streams its share once
    per lag, one sequence each with its own warm-up, the second detector's samples taken
    ``k * slide_seconds`` earlier, over the windows where that slide is formed, so every sample
    is sent up to ``N + 1`` times.

Printed: wall seconds, client and server CPU seconds, bytes sent and analysed data seconds
times slides per wall second, and the ratios of the two paths.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.bench.clients import ClientJob, ClientRun, run_clients
from offline_iaas.bench.provenance import command_line, publish
from offline_iaas.bench.server import bench_server
from offline_iaas.bench.service import stream_updates
from offline_iaas.bench.workloads import BBHNET, Workload, split_strides, write_weights
from offline_iaas.geometry import StreamGeometry
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import first_formed_window
from offline_iaas.workflow.make_dag import SEQUENCE_BLOCK

SLIDES = 100
SLIDE_SECONDS = 2.0
"""At least the workload's window (1.5 s), as the config's check asks of a campaign
(shorter neighbouring slides share windows)."""
DATA_SECONDS = 1000.0
"""Analysed data seconds in all (split between the clients)."""
CLIENTS = 2
IN_FLIGHT = 2


@dataclass(frozen=True)
class SlideJob(ClientJob):
    """A client's piece of the stretch: ``lead_windows`` streamed before its share, which
    starts ``kept_offset`` kept windows into the stretch."""

    lead_windows: int = 0
    kept_offset: int = 0
    geometry: StreamGeometry | None = None
    """The campaign's (with its slides): the stretch's warm-up, ``Δ`` in windows."""
    slides: tuple[int, ...] = ()
    """Client-side: the slide of each stream (0: the zero lag); server: ``()``."""

    def first_formed(self, share: int, slide: int) -> int:
        """The share's first window (0-based) where ``slide`` is formed (``share``: none;
        ``stretches.first_formed_window``)."""
        assert self.geometry is not None
        return min(share, max(0, first_formed_window(self.geometry, slide) - self.kept_offset))


def stream_each_lag(client, job: SlideJob, samples: np.ndarray) -> int:
    """The client-side approach: one sequence per slide over the windows where it is formed,
    each with its own warm-up; the windows analysed."""
    stride = job.load.stride_samples
    share = samples.shape[1] // stride - job.lead_windows
    assert job.geometry is not None
    windows = 0
    for number, slide in enumerate(job.slides):
        first = job.first_formed(share, slide)
        if first == share:
            continue
        start = (job.lead_windows + first - job.geometry.stretch_warmup_windows) * stride
        lag = slide * job.geometry.slide_windows * stride
        slid = np.stack([samples[0, start:], samples[1, start - lag : samples.shape[1] - lag]])
        stream_updates(
            client, dataclasses.replace(job, sequence_id=job.sequence_id + number), slid)
        windows += share - first
    return windows


@dataclass(frozen=True)
class PathCost:
    """One path's measurement."""

    name: str
    run: ClientRun
    """Its clients, and what they and the server cost."""
    slid_data_seconds: float
    """Data seconds of the windows each lag is formed on, summed over the lags (``N + 1``)."""
    streamed_data_seconds: float
    """Data seconds the clients streamed: with slides, each piece with its warm-up and
    history; client-side, each slide's formed windows with their warm-up."""
    analysed_data_seconds: float

    @property
    def rate(self) -> float:
        """Slid data seconds per wall second."""
        return self.slid_data_seconds / self.run.wall_seconds


def measure_time_slides(work_dir: Path, load: Workload = BBHNET, slides: int = SLIDES,
                        slide_seconds: float = SLIDE_SECONDS,
                        data_seconds: float = DATA_SECONDS, clients: int = CLIENTS,
                        batch_size: int | None = None) -> list[PathCost]:
    """Both paths over the same data (module docstring); ``[server, client-side]``."""
    batch_size = batch_size or load.batch_size
    weights = write_weights(load, work_dir / "weights")
    stride_seconds = load.stride_samples / load.sample_rate_hz
    shares = split_strides(int(data_seconds / stride_seconds), clients)
    offsets = [sum(shares[:i]) for i in range(len(shares))]
    costs = []
    for name, served in (("server", slides), ("client-side", 0)):
        config = load.config(work_dir / f"{name}-repository", instances=clients,
                             clients=clients, batch_size=batch_size)  # streamed, as campaigns
        config = dataclasses.replace(config, search=dataclasses.replace(
            config.search, slides=slides, slide_seconds=slide_seconds))
        warmup, history = config.stretch_warmup_windows, config.slide_history_windows
        geometry = config.geometry
        config = dataclasses.replace(config, search=dataclasses.replace(
            config.search, slides=served))
        export_repository(config, weights)
        repo = config.model.repository
        models = list(read_manifest(repo).models)
        with bench_server(repo, RunDir(work_dir / f"{name}-run"), models) as srv:
            jobs = [SlideJob(
                model=config.model.name, outputs=config.outputs.names, url=srv.url,
                headers=srv.headers, load=load,
                data_seconds=(warmup + min(history, offset) + share) * stride_seconds,
                batch_size=batch_size, in_flight=IN_FLIGHT,
                sequence_id=(index + 1) * SEQUENCE_BLOCK, seed=index,
                lead_windows=warmup + min(history, offset), kept_offset=offset,
                geometry=geometry,
                slides=() if served else tuple(range(slides + 1)),
            ) for index, (share, offset) in enumerate(zip(shares, offsets, strict=True))]
            run = run_clients(jobs, stream_updates if served else stream_each_lag,
                              srv.cpu_seconds, srv.ports.grpc)
        formed = [share - job.first_formed(share, slide)
                  for job, share in zip(jobs, shares, strict=True)
                  for slide in range(slides + 1)]
        slid = sum(formed) * stride_seconds
        streamed = (sum(job.data_seconds for job in jobs) if served
                    else sum(n + warmup for n in formed if n) * stride_seconds)
        costs.append(PathCost(name, run, slid, streamed, sum(shares) * stride_seconds))
    return costs


def markdown(costs: list[PathCost], load: Workload, slides: int, slide_seconds: float,
             clients: int) -> str:
    """The table and the ratios."""
    server, client_side = costs
    rows = [
        "| path | wall s | client CPU s | server CPU s | other processes' CPU s | MB sent "
        "| slid data-s / wall s | slid data-s / CPU s | streamed data-s "
        "| B sent / streamed data-s | B sent / analysed data-s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in costs:
        rows.append(f"| {c.name} | {c.run.wall_seconds:.1f} | {c.run.client_cpu_seconds:.1f} | "
                    f"{c.run.server_cpu_seconds:.1f} | {c.run.other_cpu_seconds:.1f} | "
                    f"{c.run.bytes_sent / 1e6:.1f} | {c.rate:.0f} | "
                    f"{c.slid_data_seconds / c.run.cpu_seconds:.0f} | "
                    f"{c.streamed_data_seconds:,.0f} | "
                    f"{c.run.bytes_sent / c.streamed_data_seconds:,.0f} | "
                    f"{c.run.bytes_sent / c.analysed_data_seconds:,.0f} |")
    raw = len(load.ifos) * load.sample_rate_hz * 4
    analysed = server.analysed_data_seconds
    return "\n".join([
        f"# Time slides: on the server against the client-side approach ({slides} slides)",
        "",
        f"Workload `{load.name}` ({len(load.ifos)} detectors at {load.sample_rate_hz:g} Hz, "
        f"{load.kernel_seconds:g} s windows at {load.inference_rate_hz:g} Hz), {clients} "
        f"clients, {analysed:.0f} analysed data seconds (one stretch, one piece per client), "
        f"{slides} slides of {slide_seconds:g} s: {server.slid_data_seconds:.0f} slid data "
        "seconds on each path (the zero lag over every kept window, slide k over the kept "
        "windows from k x slide_seconds on, where its pair lies in the stretch).",
        "",
        *rows,
        "",
        f"- throughput (slid data-s per wall s), server path over client-side: "
        f"{server.rate / client_side.rate:.2f}",
        f"- slid data-s per CPU s (clients and server), server path over client-side: "
        f"{client_side.run.cpu_seconds / server.run.cpu_seconds:.2f}",
        f"- client CPU seconds: "
        f"{client_side.run.client_cpu_seconds / server.run.client_cpu_seconds:.0f}x fewer on "
        "the server path; bytes sent: "
        f"{client_side.run.bytes_sent / server.run.bytes_sent:.0f}x fewer",
        f"- bytes per data second (TCP payload, gRPC framing included; the channels' own are "
        f"{len(load.ifos)} x {load.sample_rate_hz:g} Hz x 4 B = {raw:,.0f} B): per streamed "
        f"second the server path sends {server.run.bytes_sent / server.streamed_data_seconds:,.0f}"
        f" B, as without slides (the client-side path, which streams without slides, "
        f"{client_side.run.bytes_sent / client_side.streamed_data_seconds:,.0f} B); per analysed "
        f"second {server.run.bytes_sent / server.analysed_data_seconds:,.0f} B (x "
        f"{server.streamed_data_seconds / server.analysed_data_seconds:.3f}: each piece streams "
        f"the stretch's warm-up, and each but the first the longest slide's history, "
        f"{slides * slide_seconds:g} s, before its share) against the client-side path's "
        f"{client_side.run.bytes_sent / client_side.analysed_data_seconds:,.0f} B (every sample "
        f"once per lag where that slide is formed, up to x {slides + 1})",
        "",
        "Both paths run the same network on the same windows, and the network dominates the "
        "cost. The server path whitens each detector once for all its slides (each slide "
        "streams the layers after the whitening), where each of the client-side path's "
        "sequences whitens its own samples; it also runs the zero lag and the slides of the "
        f"history each piece inside the stretch streams again ({slides * slide_seconds:g} s "
        "per piece, the slides formed in it), and the client-side path sends every sample "
        "once per lag. Between nodes, those bytes cross the network. The paths run one after "
        "the other: where other processes took "
        "CPU during one of them (their column), its wall time, and the throughput ratio, "
        "show that machine's load more than the path; CPU seconds per slid second do not.",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slides", "--shifts", type=int, default=SLIDES)
    parser.add_argument("--slide-seconds", "--shift-seconds", type=float, default=SLIDE_SECONDS)
    parser.add_argument("--data-seconds", type=float, default=DATA_SECONDS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offline-iaas-timeslides-") as tmp:
        costs = measure_time_slides(Path(tmp), BBHNET, args.slides, args.slide_seconds,
                                    args.data_seconds, args.clients)
    publish(markdown(costs, BBHNET, args.slides, args.slide_seconds, args.clients),
            command_line("offline_iaas.bench.timeslides", argv), args.out)


if __name__ == "__main__":
    main()
