"""``offline-iaas merge``: check every client part, trim warm-ups, stitch, write the campaign.

The merge refuses to write anything when a part is missing, incomplete, from another campaign,
altered after it was written, or when the parts do not tile the span exactly; the message names
every such part.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from offline_iaas.client.part import file_sha256, part_paths, read_part, read_sidecar
from offline_iaas.client.stream import OUTPUT, load_job
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import RunError
from offline_iaas.merge.output import write_output
from offline_iaas.workflow.plan import ClientSegment


def campaign_paths(run_dir: Path) -> tuple[Path, Path]:
    return run_dir / "output" / "campaign.h5", run_dir / "output" / "campaign.json"


def check_parts(
    run_dir: Path, config: CampaignConfig, segments: list[ClientSegment]
) -> list[str]:
    """Every problem with the parts, one line each (empty when they tile the span)."""
    problems = []
    config_hash = config.config_hash()
    for seg in segments:
        h5_path, json_path = part_paths(run_dir, seg.node)
        sidecar = read_sidecar(run_dir, seg.node)
        if sidecar is None or not h5_path.exists():
            problems.append(f"{seg.node}: part missing ({h5_path})")
        elif not sidecar.get("complete"):
            problems.append(f"{seg.node}: part incomplete ({json_path})")
        elif sidecar.get("config_hash") != config_hash:
            problems.append(
                f"{seg.node}: part is from another campaign (config hash "
                f"{sidecar.get('config_hash')}, this campaign {config_hash})"
            )
        elif sidecar.get("sha256") != file_sha256(h5_path):
            problems.append(f"{seg.node}: {h5_path} changed after it was written (checksum)")
        elif (sidecar["output_start"], sidecar["output_stop"]) != (
            seg.output_start,
            seg.output_stop,
        ):
            problems.append(f"{seg.node}: part covers other windows than its job spec")
    expected = 0
    for seg in sorted(segments, key=lambda s: s.output_start):
        if seg.output_start != expected:
            kind = "gap" if seg.output_start > expected else "overlap"
            problems.append(f"{seg.node}: {kind} before window {seg.output_start}")
        expected = seg.output_stop
    if expected != config.total_windows:
        problems.append(f"segments end at window {expected}, the span has {config.total_windows}")
    return problems


def merge(run_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Merge the parts of ``run_dir`` into ``output/campaign.h5``; return its path."""
    run_dir = run_dir.resolve()
    config = load_config(run_dir / "campaign.toml")
    nodes = json.loads((run_dir / "run.json").read_text())["clients"]
    segments = [load_job(run_dir, node) for node in nodes]
    problems = check_parts(run_dir, config, segments)
    if problems:
        raise RunError(
            f"cannot merge {run_dir}: " + "; ".join(problems)
        )
    started = time.monotonic()
    statistic = np.empty(config.total_windows, dtype=np.float32)
    for seg in segments:
        values = read_part(run_dir, seg.node)[OUTPUT]
        statistic[seg.output_start : seg.output_stop] = values[seg.warmup_windows :]
    out_path, status_path = campaign_paths(run_dir)
    status_path.unlink(missing_ok=True)
    write_output(
        out_path,
        config,
        {OUTPUT: statistic},
        {"clients": len(segments), "servers": config.layout.servers, "producer": "merge"},
    )
    tmp = status_path.with_name(f".{status_path.name}.tmp")
    tmp.write_text(json.dumps({"complete": True, "windows": int(config.total_windows)}))
    os.replace(tmp, status_path)
    log(
        f"merge: {len(segments)} parts, {config.total_windows} windows -> {out_path} "
        f"in {time.monotonic() - started:.1f} s"
    )
    return out_path
