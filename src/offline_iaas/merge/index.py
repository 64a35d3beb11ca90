"""The merge tree's last node: ``output/campaign.h5`` as an index over the shard merges.

Each time series of the campaign (``statistic/<GPS>``, ``noise/<IFO>/<GPS>``...: one per
stretch, as the single merge writes them) becomes a dataset with HDF5 **external storage**
pointing at the bytes of the shard files' contiguous datasets, in time order: no sample is
copied, and ``h5py``, ``read_campaign`` and gwpy's ``TimeSeries.read(path, ...)`` read it as
before. (Virtual datasets and external links would be the usual choices, but gwpy opens the
file through a Python file object, and HDF5 then cannot open the source files: it reads the
fill value, zeros, without an error. External storage is read with plain file I/O.) The
shard files are named by absolute path: a moved run directory's index fails loudly ("unable
to open external raw data file"), a copy's reads the original's shards; ``run-local`` at the
new place writes the index again first (``completeness.written_elsewhere``), in seconds.

The campaign-wide numbers are computed here from the shards' products
(``postprocess.summarize``): the triggers' FAR over the whole background, found/missed, the
ASD numbers of the held-out run, and the GWF files' LAL cache and segment lists, the files
themselves hard-linked from the shards into ``output/frames``.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import time
from pathlib import Path

import h5py
import numpy as np

from offline_iaas import records
from offline_iaas.atomic import (
    remove_stale_temporaries,
    replace_directory,
    replaced_atomically,
    temporary_sibling,
)
from offline_iaas.completeness import Hashes, set_aside, shard_problem
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import RunError, raise_if_no_space
from offline_iaas.gps import gps_text
from offline_iaas.job_specs import read_client_job, read_shard_job
from offline_iaas.merge.foreground import read_foreground
from offline_iaas.merge.layout import (
    WINDOW_GROUPS,
    campaign_root_attrs,
    series_attrs,
    series_groups,
)
from offline_iaas.merge.postprocess import ShardProducts, summarize
from offline_iaas.merge.provenance import campaign_provenance
from offline_iaas.merge.shard_merge import read_products
from offline_iaas.merge.stitch import (
    analysed_stretches,
    clear_output,
    log_summary,
    merge_record,
    report_quietly,
    write_summary,
)
from offline_iaas.merge.tree import stretch_series
from offline_iaas.records import RunInfo
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import DatasetOffset, ShardSummary

logger = logging.getLogger(__name__)


def check_shards(run: RunDir, config: CampaignConfig, nodes: tuple[str, ...]) -> list[str]:
    """Every problem with the shard merges' outputs, one line each
    (``completeness.shard_problem``: the checksum of a shard file is read only when the file
    changed after its summary was written; the index does not read the series)."""
    hashes = Hashes.of(config)
    problems = []
    for node in nodes:
        problem = shard_problem(run, node, hashes, read_shard_job(run, node))
        if problem is not None:
            problems.append(f"{node}: {set_aside(run, problem)}")
    return problems


def write_index(run: RunDir, config: CampaignConfig, run_info: RunInfo) -> Path:
    """Write ``output/campaign.h5`` over the shard merges of ``run``; return its path."""
    nodes = run_info.shards
    out_path, status_path = clear_output(run, check_shards(run, config, nodes),
                                         f"cannot index the shard merges of {run.path}")
    started, cpu = time.monotonic(), time.process_time()
    shards = {node: records.read(ShardSummary, run.shard_output(node)[1]) for node in nodes}
    shares = [read_client_job(run, node) for node in run_info.clients]
    bad, stretches = analysed_stretches(run, config, shares)
    training = dict(run_info.training)
    remove_stale_temporaries(out_path)
    frames_dir = run.output_frames
    frames_tmp = temporary_sibling(frames_dir)
    linked = config.mode.cleans_strain
    try:
        with replaced_atomically(out_path) as tmp, h5py.File(tmp, "w") as f:
            _series(f, run, config, stretches, nodes, shards)
            products = [read_products(run.shard_output(n)[0], shards[n]) for n in nodes]
            if linked:
                shutil.rmtree(frames_tmp, ignore_errors=True)
                products = _link_frames(run, nodes, products, frames_dir, frames_tmp)
            foreground = read_foreground(run, config, shares)
            if foreground is not None:  # from the parts: the shard merges leave it out
                products.append(ShardProducts(foreground=foreground))
            summary = summarize(f, config, stretches, training, products,
                                frames_tmp if linked else None)
            f.attrs.update({
                "clients": len(shares), "servers": config.layout.servers,
                "producer": "merge", "shards": len(nodes),
                **campaign_root_attrs(config, stretches,
                                      campaign_provenance(config, run_info.model, bad))})
        if linked:
            replace_directory(frames_tmp, frames_dir)
    except BaseException as err:
        shutil.rmtree(frames_tmp, ignore_errors=True)
        raise_if_no_space(err, out_path)  # the frames' directory is the output's too
        raise
    wall = time.monotonic() - started
    shard_walls = [shards[n].wall_seconds for n in nodes]
    written = write_summary(status_path, {
        **merge_record(run, config, stretches, wall, time.process_time() - cpu),
        "shards": len(nodes),
        "shard_wall_seconds": {"total": sum(shard_walls), "max": max(shard_walls, default=0.0)},
        "shard_setup_seconds": sum(shards[n].setup_seconds for n in nodes),
        "shard_cpu_seconds": sum(shards[n].cpu_seconds for n in nodes),
        "shard_data_seconds": sum(shards[n].data_seconds for n in nodes),
        "bad_frame_files": bad,
        **summary,
    })
    logger.info(f"merge: index of {len(nodes)} shard merges -> {out_path} in {wall:.1f} s")
    log_summary(written, run)
    report_quietly(run)
    return out_path


def _groups(shards: dict[str, ShardSummary]) -> set[str]:
    return {d.name.split("/", 1)[0] for r in shards.values() for d in r.datasets}


def _series(f: h5py.File, run: RunDir, config: CampaignConfig, stretches: list,
            nodes: tuple[str, ...], shards: dict[str, ShardSummary]) -> None:
    """One dataset per stretch and series, its bytes in the shard files (external storage)."""
    # per (group path without the GPS, stretch x0 text): [(x0 of the piece, dataset record,
    # shard file)]
    pieces: dict[str, list[tuple[float, DatasetOffset, Path]]] = {}
    for node in nodes:
        path = run.shard_output(node)[0].resolve()
        for d in shards[node].datasets:
            pieces.setdefault(d.name.rsplit("/", 1)[0], []).append((d.x0, d, path))
    starts = {}
    for path, found in pieces.items():
        found.sort(key=lambda p: p[0])
        starts[path] = [p[0] for p in found]
    present = _groups(shards)
    groups = [g for g in series_groups(config.model.mode, config.outputs) if g in present]
    for stretch in stretches:
        series = stretch_series(config, stretch)
        for group in groups:
            if group in WINDOW_GROUPS:
                (x0, step, length), paths = series["windows"], [group]
            else:
                (x0, step, length) = series["samples"]
                paths = [f"{group}/{ifo}" for ifo in config.ifos]
            for index, path in enumerate(paths):
                lo = bisect.bisect_right(starts.get(path, []), x0 - step / 2)
                hi = bisect.bisect_left(starts.get(path, []), x0 + (length - 0.5) * step)
                found = pieces.get(path, [])[lo:hi]
                shape = (length, *found[0][1].shape[1:]) if found else (length,)
                if group == "slides" and not found:
                    shape = (length, config.search.slides)
                dataset = _external(f, f"{path}/{gps_text(x0)}", shape, found, x0, step)
                series_attrs(dataset, config, group, index, x0)


def _external(f: h5py.File, name: str, shape: tuple[int, ...],
              found: list[tuple[float, DatasetOffset, Path]], x0: float, step: float
              ) -> h5py.Dataset:
    """A dataset whose bytes are the pieces', which must tile it in order."""
    expected = 0
    external = []
    for piece_x0, d, path in found:
        at = round((piece_x0 - x0) / step)
        if at != expected or d.offset is None:
            raise RunError(f"{name}: the shard merges' pieces do not tile it ({path}: "
                           f"{d.name} starts at value {at}, expected {expected})")
        expected += d.shape[0]
        external.append((str(path), d.offset, d.nbytes))
    if expected != shape[0]:
        raise RunError(f"{name}: the shard merges hold {expected} of its {shape[0]} values")
    if not external:
        return f.create_dataset(name, shape=shape, dtype=np.float32)
    return f.create_dataset(name, shape=shape, dtype=np.float32, external=external)


def _link_frames(run: RunDir, nodes: tuple[str, ...], products: list, frames_dir: Path,
                 frames_tmp: Path) -> list:
    """Hard-link (or copy) every shard's GWF files into ``frames_tmp``; the products then name
    them where they will be, in ``frames_dir``."""
    for node, part in zip(nodes, products, strict=True):
        moved = []
        for ifo, name, gps, seconds in part.frame_files:
            source = run.shard_frames(node) / name
            target = frames_tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:  # another filesystem, or no hard links
                shutil.copy2(source, target)
            moved.append((ifo, frames_dir / name, gps, seconds))
        part.frame_files = moved
    frames_tmp.mkdir(parents=True, exist_ok=True)
    return products
