"""``offline-iaas merge-shard``: one node of the merge tree (``merge/tree.py``).

A shard merge checks its parent clients' parts, stages the kept windows its shard and the
post-processing padding need, and writes ``output/shards/<node>.h5`` (the shard's owned values
as contiguous datasets, with its mode's products in group ``products``: BBHnet's triggers and
background, DeepClean's held-out strain), its GWF files in
``output/shards/<node>.frames`` and last its summary ``output/shards/<node>.json``, which
records every dataset's byte offset for the index (``merge/index.py``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import h5py

from offline_iaas import records
from offline_iaas.binding import check_job_specs, read_bound_run
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.gwf_reader import reader
from offline_iaas.digests import file_sha256
from offline_iaas.errors import RunError, raise_if_no_space
from offline_iaas.gps import gps_span_text
from offline_iaas.job_specs import read_client_job, read_shard_job
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.merge.layout import series_groups
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.merge.stitch import bad_files, campaign_stretches, check_parts, stage_parts
from offline_iaas.merge.tree import extent_data_seconds, shard_extents
from offline_iaas.resources import peak_rss_mb
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import DatasetOffset, ShardSummary

logger = logging.getLogger(__name__)

PRODUCTS_GROUP = "products"
"""The shard file's group of ``ShardProducts.arrays``."""
_BEFORE_PRODUCTS = ("triggers", "background", "held_out", "raw")
"""Where a shard file kept them before (read as none, they would be lost: refused)."""

def merge_shard(run: RunDir, node: str, progress: NullProgress = NO_PROGRESS) -> Path:
    """Merge shard ``node`` of ``run``; return its output file."""
    config, run_info = read_bound_run(run)
    check_job_specs(run, run_info, [node, *run_info.clients])
    shard = read_shard_job(run, node)
    shares = [read_client_job(run, client) for client in run_info.clients]
    parent_nodes = set(shard.clients)
    problems = check_parts(run, config, shares, read=parent_nodes)
    if problems:
        raise RunError(f"cannot merge {node} of {run.path}: " + "; ".join(problems))
    started, cpu = time.monotonic(), time.process_time()
    out_path, status_path = run.shard_output(node)
    status_path.unlink(missing_ok=True)
    run.output[1].unlink(missing_ok=True)  # the index over the old shard is out of date
    # with data.on_bad_file = "gap" its parents are every client of its stretches, so they
    # hold every bad file that cuts them (merge/tree.py)
    bad = bad_files(run, shares, parent_nodes)
    stretches = campaign_stretches(config, shares, bad)
    extents = shard_extents(config, stretches, shard.gps_start, shard.gps_end)
    cleans = config.mode.cleans_strain
    frames = discover_frames(config.data) if cleans else None
    _load_libraries(cleans)
    setup_seconds = time.monotonic() - started
    writer = CampaignWriter(out_path, config, stretches, run.shard_frames(node) if cleans else None,
                            dict(run_info.training), run_info.model, extents, bad)
    parents = [share for share in shares if share.node in parent_nodes]
    try:
        stage_parts(run, config, parents, writer, node, progress, stretches)
        products = writer.postprocess(frames)
        _store_products(writer.file, products)
        writer.close({"producer": "merge-shard", "shard": node,
                      "shard_gps": [shard.gps_start, shard.gps_end]})
    except BaseException as err:
        writer.discard()
        raise_if_no_space(err, out_path)
        raise
    # planned less the gaps of bad frame files (the index fails the run if nothing is left)
    analysed = extent_data_seconds(config, extents)
    frames_dir = run.shard_frames(node)
    frames_dir.mkdir(exist_ok=True)  # empty without DeepClean: file transfer expects it
    record = records.build(ShardSummary, {
        "complete": True,
        "node": node,
        "gps": [shard.gps_start, shard.gps_end],
        "data_seconds": shard.data_seconds,
        "analysed_seconds": analysed,
        "clients": list(shard.clients),
        "wall_seconds": time.monotonic() - started,
        "setup_seconds": setup_seconds,
        "cpu_seconds": time.process_time() - cpu,
        "peak_rss_mb": peak_rss_mb(),
        "merge_hash": config.merge_hash(),
        "bytes": out_path.stat().st_size,
        "sha256": file_sha256(out_path),
        "datasets": _dataset_offsets(out_path, series_groups(config.model.mode, config.outputs)),
        "frame_files": [[ifo, str(path.relative_to(frames_dir)), gps, seconds]
                        for ifo, path, gps, seconds in products.frame_files],
        "frame_spans": products.frame_spans,
        "bad_frame_files": bad,
    })
    records.write(record, status_path)
    data = f"{analysed:.0f} s of data"
    if analysed != shard.data_seconds:
        data = (f"{analysed:.0f} of its {shard.data_seconds:.0f} s of data, the rest in gaps "
                f"of {len(bad)} bad frame file(s)")
    logger.info(f"merge-shard: {node} (GPS {gps_span_text(shard.gps_start, shard.gps_end)}, "
                f"{data}, from {len(parents)} parts) -> {out_path} in {record.wall_seconds:.1f} s")
    return out_path


def _load_libraries(cleans_strain: bool) -> None:
    """What a shard merge loads whatever its data (its set-up, timed apart so that ``plan``
    scales only the rest with the data): when it writes cleaned strain, gwpy (its ASDs and
    GWF files) and the frame reader with the frame library; otherwise nothing."""
    if cleans_strain:
        import gwpy.timeseries  # noqa: F401

        reader().start()


def _store_products(file: h5py.File, products: ShardProducts) -> None:
    """What the index needs besides the series: the mode's arrays, in group ``products``."""
    for name, values in products.arrays.items():
        file.create_dataset(f"{PRODUCTS_GROUP}/{name}", data=values)


def read_products(path: Path, record: ShardSummary) -> ShardProducts:
    """A shard's ``ShardProducts`` back from its file and summary."""
    products = ShardProducts()
    with h5py.File(path, "r") as f:
        if PRODUCTS_GROUP not in f and any(name in f for name in _BEFORE_PRODUCTS):
            raise RunError(f"{path}: a shard merge's file of an offline-iaas from before its "
                           f"products were kept in group {PRODUCTS_GROUP!r}: run its "
                           "merge-shard node again (delete the file and its .json)")

        def visit(name: str, item: object) -> None:
            if isinstance(item, h5py.Dataset):
                products.arrays[name] = item[()]

        if PRODUCTS_GROUP in f:
            f[PRODUCTS_GROUP].visititems(visit)
    products.frame_files = [(ifo, Path(name), gps, seconds)
                            for ifo, name, gps, seconds in record.frame_files]
    products.frame_spans = {ifo: {kind: list(spans) for kind, spans in kinds.items()}
                            for ifo, kinds in record.frame_spans.items()}
    return products


def _dataset_offsets(path: Path, groups: tuple[str, ...]) -> list[DatasetOffset]:
    """Every series dataset of ``groups`` in a shard file: name, group, x0, shape, byte offset
    and size (contiguous storage, so the index can point at the bytes)."""
    found: list[DatasetOffset] = []
    with h5py.File(path, "r") as f:
        def visit(name: str, item: object) -> None:
            if (isinstance(item, h5py.Dataset) and name.split("/", 1)[0] in groups
                    and item.dtype.names is None):
                offset = item.id.get_offset()
                found.append(DatasetOffset(name, float(item.attrs["x0"]), tuple(item.shape),
                                           None if offset is None else int(offset),
                                           int(item.size * item.dtype.itemsize)))
        f.visititems(visit)
    return found
