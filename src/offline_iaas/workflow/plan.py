"""Segment planning: split the span into client segments (pure logic, no I/O).

Windows are numbered over the whole span. Window ``i`` covers the samples
``[(i + 1) * stride - kernel, (i + 1) * stride)`` counted from the span's start and is stamped
with the GPS time of its end. One uninterrupted stream from the span's start (zero-filled state)
produces every window in order; that stream is the reference.

A client that owns windows ``[output_start, output_stop)`` starts its own stream
``warmup_windows`` windows earlier, so that its state is filled with real data by the first
window it keeps. A stream's window ``j`` is exact once ``(j + 1) * stride >= kernel``, hence
``warmup_windows = ceil(kernel / stride) - 1``. The first client starts at the span's start, as
the reference does, and needs no warm-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from offline_iaas.config import CampaignConfig


@dataclass(frozen=True)
class ClientSegment:
    """One client's share of the span."""

    index: int
    node: str
    """DAG node name, e.g. ``client3``."""
    server: str
    """DAG node name of its server, e.g. ``server1``."""
    sequence_id: int
    """Triton sequence (correlation) ID, unique on its server; never 0."""
    first_window: int
    """First window the client's stream produces (warm-up included)."""
    output_start: int
    """First window the client keeps."""
    output_stop: int
    """One past the last window the client keeps."""
    gps_start: float
    """GPS time of the first sample the client streams."""
    gps_end: float
    """GPS time one sample after the last sample the client streams."""

    @property
    def warmup_windows(self) -> int:
        return self.output_start - self.first_window

    @property
    def windows(self) -> int:
        """Windows the stream produces, warm-up included."""
        return self.output_stop - self.first_window

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "warmup_windows": self.warmup_windows}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientSegment:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**fields)


def server_name(index: int) -> str:
    return f"server{index}"


def client_name(index: int) -> str:
    return f"client{index}"


def window_gps(config: CampaignConfig, window: int) -> float:
    """GPS time stamped on a window: the end of the window."""
    return config.data.start + (window + 1) * config.stride_samples / config.data.sample_rate


def plan_segments(config: CampaignConfig, sequence_base: int = 0) -> list[ClientSegment]:
    """Split the span's windows into ``servers * clients_per_server`` near-equal segments.

    Parameters
    ----------
    config
        The campaign.
    sequence_base
        Added to every sequence ID, so that two campaigns sharing a server cannot collide.

    Returns
    -------
    The client segments in time order; client ``i`` is served by server
    ``i // clients_per_server``.
    """
    per_server = config.layout.clients_per_server
    count = config.layout.servers * per_server
    total = config.total_windows
    bounds = [round(i * total / count) for i in range(count + 1)]
    stride_seconds = config.stride_samples / config.data.sample_rate
    segments = []
    for i in range(count):
        start, stop = bounds[i], bounds[i + 1]
        first = max(0, start - config.warmup_windows)
        segments.append(
            ClientSegment(
                index=i,
                node=client_name(i),
                server=server_name(i // per_server),
                sequence_id=sequence_base + i + 1,
                first_window=first,
                output_start=start,
                output_stop=stop,
                gps_start=config.data.start + first * stride_seconds,
                gps_end=config.data.start + stop * stride_seconds,
            )
        )
    return segments


def request_sizes(windows: int, batch_size: int) -> list[int]:
    """Windows carried by each request of a stream: full batches, then the remainder."""
    full, rest = divmod(windows, batch_size)
    return [batch_size] * full + ([rest] if rest else [])
