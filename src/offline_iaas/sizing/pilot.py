"""What a finished campaign (a pilot) measured: where its wall time went.

Read from the run directory's own records: ``local-state.json`` (when each node started and
ended, written by ``run-local``), the parts' sidecars (each client's first request and last
response) and ``campaign.toml``. ``offline-iaas plan --from-run`` scales these to a longer
campaign of the same config (``sizing/plan.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from offline_iaas import records
from offline_iaas.binding import check_run_directory
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import ConfigError, RunError, names_text
from offline_iaas.local_state import NodeRecord, read_local_state, unix_seconds
from offline_iaas.records import PartRecord
from offline_iaas.rundir import MERGE_NODE, RunDir
from offline_iaas.summaries import CampaignSummary
from offline_iaas.workflow.dag import FINAL_NODE


@dataclass(frozen=True)
class PilotRun:
    """Timings of a finished campaign (seconds)."""

    run: RunDir
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
    with the data; the rest of the merge node (start-up, the report) is in ``other_seconds``.
    With shard merges: the time from the last client's last response to the index's end."""
    merge_rate: float = 0.0
    """Data seconds per wall second of one merge node (a shard merge's own work less its
    set-up; the single merge's), the merge's throughput measured like the clients'."""
    merge_setup_seconds: float = 0.0
    """A shard merge's set-up, whatever its data (loading its libraries and the frame
    reader): the mean over the pilot's shard merges."""
    index_seconds: float = 0.0
    """The index node's own work (with shard merges; 0 without)."""
    shards: int = 0
    """Shard merges of the pilot (0: one merge node)."""
    job_start_seconds: float = 0.0
    """A job's start-up: the merge node's wall time less its own work."""
    final_seconds: float = 0.0
    """The FINAL node's wall time."""
    streamed_seconds: float = 0.0
    """Data seconds the clients streamed, warm-ups included."""
    analysed_seconds: float = 0.0
    """Data seconds the clients' kept windows cover (the output's span, warm-ups excluded)."""
    tensor_bytes_sent: int = 0
    """Bytes of the tensors the clients sent (their sidecars' ``tensor_bytes_sent``)."""

    @property
    def data_seconds(self) -> float:
        """The span the campaign analysed (``data.duration``)."""
        return self.config.data.duration

    @property
    def other_seconds(self) -> float:
        """What is left (does not grow with the data): the merge node's start-up and report,
        the FINAL node, servers stopping."""
        return self.run_seconds - self.start_seconds - self.streaming_seconds - self.merge_seconds

    @property
    def streaming_rate(self) -> float:
        """Data seconds per wall second of all servers together while streaming."""
        return self.data_seconds / self.streaming_seconds


def read_pilot(run: RunDir) -> PilotRun:
    """The timings of the finished campaign in ``run``.

    Raises
    ------
    RunError
        No run directory (``binding.check_run_directory``), or one that ``run-local`` has not
        finished; a damaged record (``records.read``: a time that is not a finite number), a
        part whose last response is not after its first request, or whose requests are not
        within its node's run (``_within``).
    ConfigError
        A run whose parts do not record their request times (written by an older version).
    """
    check_run_directory(run)
    config = load_config(run.config)
    state = read_local_state(run)
    if state is None:
        raise RunError(f"{run.path}: not a finished run (no {run.local_state.name}: run it "
                       "with offline-iaas run-local first)")
    nodes = state.nodes
    unfinished = [n for n, s in nodes.items() if not (s.started and s.ended)]
    if unfinished or MERGE_NODE not in nodes:
        raise RunError(f"{run.path}: not a finished run (nodes without an end: "
                       f"{', '.join(unfinished) or f'{MERGE_NODE} missing'})")
    first = min(unix_seconds(s.started) for s in nodes.values() if s.started)
    last = max(unix_seconds(s.ended) for s in nodes.values() if s.ended)
    paths = sorted(run.parts.glob("*.json"))
    parts = [records.read(PartRecord, p) for p in paths]
    requests = [p.first_request_unix for p in parts]
    responses = [p.last_response_unix for p in parts]
    if not parts or None in requests or None in responses:
        raise ConfigError(f"{run.parts}: the client sidecars do not record their first "
                          "request and last response; run the pilot with this version")
    backwards = [str(path) for path, part in zip(paths, parts, strict=True)
                 if part.last_response_unix <= part.first_request_unix]  # type: ignore[operator]
    if backwards:
        raise RunError(f"{names_text(backwards, shown=2)}: field last_response_unix is not after "
                       "first_request_unix (a client answered before it asked): the part "
                       "sidecar is damaged; run the pilot again")
    outside = [str(path) for path, part in zip(paths, parts, strict=True)
               if part.node in nodes and not _within(part, nodes[part.node])]
    if outside:
        raise RunError(
            f"{names_text(outside, shown=2)}: the part's requests (first_request_unix to "
            f"last_response_unix) are not within its node's run in {run.local_state} (its first "
            f"attempt's start to its end, {CLOCK_TOLERANCE_SECONDS:g} s either side): a "
            "sidecar or local state of another run, or the clock set back while the pilot "
            "ran; run the pilot again")
    first_request = min(r for r in requests if r is not None)
    last_response = max(r for r in responses if r is not None)
    summary = records.read(CampaignSummary, run.output[1])
    shards = summary.shards
    # what the merge counted (bad-file gaps the clients met left out), else the shares' plan
    analysed = (summary.analysed_seconds
                or sum(part.share.kept_windows for part in parts) * config.stride_seconds)
    merge_node = nodes[MERGE_NODE]
    merge_end = unix_seconds(str(merge_node.ended))  # every node has started and ended
    merge_wall = merge_end - unix_seconds(str(merge_node.started))
    own = summary.wall_seconds
    if shards:
        setup = summary.shard_setup_seconds
        walls = (summary.shard_wall_seconds.total if summary.shard_wall_seconds else 0.0) - setup
        merge_rate = summary.shard_data_seconds / walls if walls > 0 else 0.0
        merge_seconds = merge_end - last_response
    else:  # the data it merged: the kept windows, not the gaps
        merged = analysed or config.data.duration
        merge_rate = merged / own if own else 0.0
        merge_seconds = own
    final = nodes.get(FINAL_NODE)
    final_seconds = (unix_seconds(final.ended) - unix_seconds(final.started)
                     if final is not None and final.started and final.ended else 0.0)
    return PilotRun(
        run=run,
        config=config,
        run_seconds=last - first,
        start_seconds=first_request - first,
        streaming_seconds=last_response - first_request,
        merge_seconds=merge_seconds,
        merge_rate=merge_rate,
        merge_setup_seconds=setup / shards if shards else 0.0,
        index_seconds=own if shards else 0.0,
        shards=shards,
        job_start_seconds=max(0.0, merge_wall - own),
        final_seconds=final_seconds,
        streamed_seconds=sum(part.share.streamed_seconds for part in parts),
        analysed_seconds=analysed,
        tensor_bytes_sent=sum(part.tensor_bytes_sent for part in parts),
    )


CLOCK_TOLERANCE_SECONDS = 1.0
"""How far a part's request times may lie outside its node's run (``_within``). Both are
the wall clock of one machine (run-local runs every node as its own child process): run-local
records a node's start before it starts the process and its end after it has reaped it, to
the millisecond, truncated (an end may read up to 1 ms early); the client records its times
between. 1 s covers that, and a step of the clock under a second (ntpd steps it when it is
more than 128 ms off) while the pilot ran, which moves its timings by as little; a sidecar
or state of another run, or a larger step, is off by far more, and would make the pilot's
start-up, streaming and merge times wrong."""


def _within(part: PartRecord, node: NodeRecord) -> bool:
    """Whether the part's first request and last response lie within its node's run (from its
    first attempt's start: an attempt may have written the part and failed after, and the
    next found it complete; to its last attempt's end), ``CLOCK_TOLERANCE_SECONDS`` either
    side."""
    starts = [unix_seconds(a.started) for a in node.history if a.started]
    start = min([*starts, unix_seconds(str(node.started))])  # read_pilot: every node ran
    end = unix_seconds(str(node.ended))
    first, last = part.first_request_unix, part.last_response_unix
    assert first is not None and last is not None  # read_pilot: every part records both
    return (start - CLOCK_TOLERANCE_SECONDS <= first
            and last <= end + CLOCK_TOLERANCE_SECONDS)


def check_same_stream(pilot: PilotRun, config: CampaignConfig) -> None:
    """ConfigError unless the pilot streamed what ``config`` streams (its rates apply)."""
    same = (pilot.config.model.mode, pilot.config.stream_channels, pilot.config.kernel_samples,
            pilot.config.stride_samples, pilot.config.data.sample_rate,
            pilot.config.outputs.searches_raw_strain)
    wanted = (config.model.mode, config.stream_channels, config.kernel_samples,
              config.stride_samples, config.data.sample_rate, config.outputs.searches_raw_strain)
    if same != wanted:
        raise ConfigError(f"--from-run {pilot.run.path}: the pilot streams {same}, the campaign "
                          f"{wanted} (mode, channels, kernel, stride, rate, the e2e search on the "
                          "raw strain): run a pilot of this config")
