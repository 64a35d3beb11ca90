"""``offline-iaas merge``: check every client part, trim warm-ups, stitch, write the campaign.

The merge refuses to write anything when a part is missing, incomplete, from another campaign,
altered after it was written, or when the pieces do not tile every stretch exactly; the message
names every such part (``merge/stitch.py``). With shard merges in the DAG
(``merge.shard_seconds``) the merge node writes their index instead (``merge/index.py``).
``output/campaign.json``, written last, records the output file's SHA-256 (with shard merges:
the index file's; the shards' records hold their sizes) and the campaign's config hash (the
parts' sidecars ``parts/<node>.json`` record theirs).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from offline_iaas.binding import check_job_specs, read_bound_run
from offline_iaas.data.discovery import discover_frames
from offline_iaas.errors import raise_if_no_space
from offline_iaas.job_specs import read_client_job
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.merge.foreground import read_foreground
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.stitch import (
    analysed_stretches,
    check_parts,
    clear_output,
    log_summary,
    merge_record,
    report_quietly,
    stage_parts,
    write_summary,
)
from offline_iaas.rundir import MERGE_NODE, RunDir

logger = logging.getLogger(__name__)


def merge(run: RunDir, progress: NullProgress = NO_PROGRESS) -> Path:
    """Merge the parts of ``run`` into ``output/campaign.h5``; return its path.

    With shard merges in the DAG (``merge.shard_seconds``) the shards are merged already and
    this writes their index (``merge/index.py``). ``progress`` counts the windows merged and
    notes the part being copied.
    """
    config, run_info = read_bound_run(run)
    check_job_specs(run, run_info, [*run_info.clients, *run_info.shards])
    if run_info.shards:
        from offline_iaas.merge.index import write_index

        return write_index(run, config, run_info)
    nodes = run_info.clients
    shares = [read_client_job(run, node) for node in nodes]
    out_path, status_path = clear_output(run, check_parts(run, config, shares),
                                         f"cannot merge {run.path}")
    started, cpu = time.monotonic(), time.process_time()
    frames = discover_frames(config.data) if config.mode.cleans_strain else None
    bad, stretches = analysed_stretches(run, config, shares)
    writer = CampaignWriter(out_path, config, stretches, run.output_frames,
                            dict(run_info.training), run_info.model, bad_files=bad)
    try:
        stage_parts(run, config, shares, writer, MERGE_NODE, progress, stretches)
        writer.foreground = read_foreground(run, config, shares)
        summary = writer.commit(
            {"clients": len(shares), "servers": config.layout.servers, "producer": "merge"},
            frames,
        )
    except BaseException as err:
        writer.discard()
        raise_if_no_space(err, out_path)
        raise
    wall = time.monotonic() - started
    record = merge_record(run, config, stretches, wall, time.process_time() - cpu)
    written = write_summary(status_path, {**record, **summary, "bad_frame_files": bad})
    kept = sum(share.kept_windows for share in shares)
    logger.info(f"merge: {len(shares)} parts, {kept} windows -> {out_path} in {wall:.1f} s")
    log_summary(written, run)
    report_quietly(run)
    return out_path
