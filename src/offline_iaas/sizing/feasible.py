"""Whether ``make-dag`` accepts a layout: ``plan`` checks its recommendation with this.

``plan`` reads no frames, so it plans the stretches that ``make-dag`` would find from what it
has: the science segments of ``data.segments`` when the file is here (else the whole span as
one stretch, the longest any stretch can be). On those it runs ``make-dag``'s own planning,
the client shares (``stretches.client_shares``) and the shard merges
(``merge/tree.shard_merges``), with the recommended overrides applied to the config, so a
recommendation that ``make-dag`` would refuse (more client shares than windows, more shards
in a stretch than the index holds, a config check) is caught by the code that refuses it.
The repository's sequence slots are checked too when it is exported already.
"""

from __future__ import annotations

from pathlib import Path

from offline_iaas.config import CampaignConfig, override_config
from offline_iaas.data.segments import compute_stretches, min_stretch_seconds, science_segments
from offline_iaas.errors import ConfigError, DataError, ModelError
from offline_iaas.manifest import MANIFEST_FILE, read_manifest
from offline_iaas.merge.tree import shard_merges
from offline_iaas.stretches import Stretch, client_shares, make_stretches, whole_span
from offline_iaas.workflow.make_dag import SEQUENCE_BLOCK


def planned_stretches(config: CampaignConfig) -> list[Stretch]:
    """The stretches ``make-dag`` would plan as far as known without frames: the science
    segments' (``data.segments``, when readable here) on the stride grid, else the span."""
    try:
        science = science_segments(config.data)
    except DataError:
        science = None
    if science is None:
        return whole_span(config)
    end = config.data.start + config.total_windows * config.stride_seconds
    span = compute_stretches((config.data.start, end), {}, science, config.data.start,
                             config.stride_seconds, min_stretch_seconds(config.geometry))
    return make_stretches(config.geometry, span.stretches) or whole_span(config)


def longest_stretch_seconds(config: CampaignConfig) -> float:
    """The longest of ``planned_stretches`` (seconds)."""
    return max(s.gps_end - s.gps_start for s in planned_stretches(config))


def sequence_slots(repository: Path) -> int | None:
    """The sequence slots the exported ``repository`` holds (None: not exported yet)."""
    if not (repository / MANIFEST_FILE).exists():
        return None
    try:
        return read_manifest(repository).sequence_slots
    except ModelError:
        return None


def refusal(config: CampaignConfig, overrides: list[str]) -> str | None:
    """Why ``make-dag`` would refuse ``config`` with ``overrides`` (None: it accepts it)."""
    try:
        planned = override_config(config, overrides)
        clients = planned.layout.servers * planned.layout.clients_per_server
        if clients >= SEQUENCE_BLOCK:
            return f"{clients} client shares do not fit in one sequence block"
        stretches = planned_stretches(planned)
        shares = client_shares(planned, stretches)
        shard_merges(planned, stretches, shares)
    except ConfigError as err:
        return str(err)
    slots = sequence_slots(planned.model.repository)
    if slots is not None and slots < planned.layout.clients_per_server:
        return (f"{planned.model.repository} holds {slots} sequence slots, fewer than "
                f"{planned.layout.clients_per_server} clients per server: export it again")
    return None
