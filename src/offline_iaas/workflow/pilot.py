"""What a finished campaign (a pilot) measured: where its wall time went.

Read from the run directory's own records: ``local-state.json`` (when each node started and
ended, written by ``run-local``), the parts' sidecars (each client's first request and last
response) and ``campaign.toml``. ``offline-iaas plan --from-run`` scales these to a longer
campaign of the same config (``bench/capacity.py``).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import ConfigError
from offline_iaas.rundir import RunDir


@dataclass(frozen=True)
class PilotRun:
    """Timings of a finished campaign (seconds)."""

    run_dir: Path
    config: CampaignConfig
    """The pilot's resolved config (``RUN/campaign.toml``)."""
    run_seconds: float
    """First node's start to last node's end."""
    start_seconds: float
    """First node's start to the first client's first request (server start-up, discovery)."""
    streaming_seconds: float
    """First client's first request to the last client's last response."""
    merge_seconds: float
    """The merge's own work (stitching, post-processing; ``output/campaign.json``), which grows
    with the data; the rest of the merge node (start-up, the report) is in ``other_seconds``."""

    @property
    def data_seconds(self) -> float:
        """The span the campaign analysed (``data.duration``)."""
        return self.config.data.duration

    @property
    def servers(self) -> int:
        return self.config.layout.servers

    @property
    def clients_per_server(self) -> int:
        return self.config.layout.clients_per_server

    @property
    def batch_size(self) -> int:
        return self.config.model.batch_size

    @property
    def other_seconds(self) -> float:
        """What is left (does not grow with the data): the merge node's start-up and report,
        the FINAL node, servers stopping."""
        return self.run_seconds - self.start_seconds - self.streaming_seconds - self.merge_seconds

    @property
    def streaming_rate(self) -> float:
        """Data seconds per wall second of all servers together while streaming."""
        return self.data_seconds / self.streaming_seconds


def _unix(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (is this a finished run directory?)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: unreadable: {err}") from None


def read_pilot(run_dir: Path) -> PilotRun:
    """The timings of the finished campaign in ``run_dir``.

    Raises
    ------
    ConfigError
        A run directory that ``run-local`` has not finished, or whose parts do not record
        their request times (written by an older version).
    """
    run_dir = Path(run_dir)
    run = RunDir(run_dir)
    config = load_config(run.config)
    nodes = _json(run.local_state)["nodes"]
    unfinished = [n for n, s in nodes.items() if not (s.get("started") and s.get("ended"))]
    if unfinished or "merge" not in nodes:
        raise ConfigError(f"{run_dir}: not a finished run (nodes without an end: "
                          f"{', '.join(unfinished) or 'merge missing'})")
    first = min(_unix(s["started"]) for s in nodes.values())
    last = max(_unix(s["ended"]) for s in nodes.values())
    parts = [_json(p) for p in sorted(run.parts.glob("*.json"))]
    requests = [p.get("first_request_unix") for p in parts]
    responses = [p.get("last_response_unix") for p in parts]
    if not parts or None in requests or None in responses:
        raise ConfigError(f"{run_dir}/parts: the client sidecars do not record their first "
                          "request and last response; run the pilot with this version")
    summary = _json(run.output[1])
    return PilotRun(
        run_dir=run_dir,
        config=config,
        run_seconds=last - first,
        start_seconds=min(requests) - first,
        streaming_seconds=max(responses) - min(requests),
        merge_seconds=float(summary["wall_seconds"]),
    )
