"""The limit: the mode's graphs in-process over the whole span, no server.

What a user's own loop would do: run the exported graphs with onnxruntime on batches of
``batch_size`` windows (the same sessions settings as the served model), average DeepClean's
overlapping predictions, subtract and window the cleaned strain (e2e). That loop is
``pipeline.mode_stream`` (the fused model's step, ``ModeStream``), on the graphs of the
repository it is given: the service's (the streamed graphs where the workload streams) for the
limit, the whole-window repository's for the whole-window limit; a zero state at each share's
start, so the same windows are computed. No network, no serialisation, no server.

The same threads as the server: the server's ``instances`` stub processes run one
onnxruntime thread each. A user's loop could spend them two ways, and the limit is the faster:
one worker process per instance, each with one thread, over a contiguous share of the span
(the server's layout; processes, not threads, as the GIL would serialise the Python between
the calls), or one process whose sessions have ``instances`` threads (measured on 2 cores:
BBHnet at batch 128 runs about 20 % faster so, DeepClean slower). Both are measured at every
point; the report takes the fastest repeat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offline_iaas.bench.clients import run_clients
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.workloads import Workload, split_strides
from offline_iaas.config import CampaignConfig
from offline_iaas.repository.backend.stateful import keep_freed_memory
from offline_iaas.repository.pipeline import mode_stream
from offline_iaas.repository.served import network_sessions


def run_share(sessions: dict, config: CampaignConfig, samples: np.ndarray,
              batch_size: int) -> int:
    """Stream ``samples`` [channels, m * stride] through the mode's step in batches of
    ``batch_size`` windows; return m."""
    stream = mode_stream(config, sessions)
    step = batch_size * config.stride_samples
    for first in range(0, samples.shape[1], step):
        stream.update(samples[:, first : first + step])
    return samples.shape[1] // config.stride_samples


@dataclass(frozen=True)
class LimitJob:
    """One worker of the limit: a share of the span through its own onnxruntime sessions."""

    load: Workload
    config: CampaignConfig
    """The workload's config; its repository holds the graphs."""
    batch_size: int
    data_seconds: float
    seed: int
    threads: int = 1
    """onnxruntime intra-op threads of its sessions."""
    device: str = "cpu"
    """Where its sessions run (``stateful.open_session``)."""

    def open(self) -> object:
        """The sessions, run once (first calls allocate; not part of the measurement); the
        heap kept as the served model keeps it (``stateful.keep_freed_memory``)."""
        keep_freed_memory()
        sessions = network_sessions(self.config, self.threads, self.device)
        warm = np.zeros((self.load.channels, self.batch_size * self.load.stride_samples),
                        np.float32)
        run_share(sessions, self.config, warm, self.batch_size)
        return sessions

    def close(self, handle: object) -> None:
        pass


def stream_limit(sessions, job: LimitJob, samples: np.ndarray) -> int:
    """The limit worker's loop (``run_share``) as a ``clients.Streamer``."""
    return run_share(sessions, job.config, samples, job.batch_size)


def measure_limit(
    load: Workload, config: CampaignConfig, batch_size: int, data_seconds: float,
    clients: int = 1, seed: int = 0, processes: int | None = None, device: str = "cpu",
) -> Measurement:
    """Data seconds per wall second of the in-process loops over ``data_seconds`` of data.

    ``processes`` worker processes (default: one per server instance,
    ``config.server.instances``) each over a contiguous share, their sessions sharing the
    instances' threads (on ``device``). ``clients`` only labels the measurement with the
    sweep point's ``k``.
    """
    instances = config.server.instances
    processes = processes or instances
    strides = int(data_seconds * load.sample_rate_hz) // load.stride_samples
    stride_seconds = load.stride_samples / load.sample_rate_hz
    jobs = [
        LimitJob(load, config, batch_size, share * stride_seconds, seed + index,
                 max(1, instances // processes), device)
        for index, share in enumerate(split_strides(strides, processes))
    ]
    run = run_clients(jobs, stream_limit)
    return Measurement(
        path="limit",
        workload=load.name,
        batch_size=batch_size,
        clients=clients,
        threads=instances,
        data_seconds=load.window_seconds(run.windows),
        wall_seconds=run.wall_seconds,
        client_cpu_seconds=run.client_cpu_seconds,
        other_cpu_seconds=run.other_cpu_seconds,
        extra={"processes": processes, "threads_per_process": jobs[0].threads},
    )
