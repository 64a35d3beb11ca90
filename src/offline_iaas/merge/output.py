"""The campaign's HDF5 output, written by the merge and by the reference alike.

One dataset per output and analysable stretch, at ``<output>/<GPS of its first value>``, in
gwpy's TimeSeries layout, so each reads with ``TimeSeries.read(path, format="hdf5",
path="statistic/1262304001")`` (``read_campaign`` reads them all):

- ``statistic/<GPS>``: one value per window, stamped at the end of its window (``dx`` = stride);
- ``noise/<IFO>/<GPS>``: DeepClean's averaged prediction, band-passed (what was subtracted);
- ``clean/<IFO>/<GPS>``: the cleaned strain, ``strain - noise``, channel ``<strain>_CLEAN``;
- ``triggers``: a table (``time``, ``statistic``) of the clustered statistic; with time
  slides also ``far`` (Hz) and ``ifar`` (years);
- ``slides/<GPS>`` (time slides): ``[windows, N]``, BBHnet on each window with the second
  detector ``kΔ`` earlier in column ``k - 1`` (``Δ``: ``search.slide_seconds``, the
  dataset's ``shift_seconds`` attribute; stamped like the statistic), NaN where that slide is
  not formed (its second window before the stretch's first kept window: the first ``kΔ`` of
  each stretch, ``stretches.slides_formed``);
- ``background`` (time slides): a table (``shift``, ``time``, ``statistic``) of each
  slide's clustered statistic, the time being the first detector's, ordered by shift, then
  time.

With shard merges (``merge.shard_seconds``) the merge node writes the same datasets as an index
whose bytes lie in the shards' files (``merge/index.py``).

There are no samples inside gaps. Provenance goes on the file's attributes (gwpy refuses extra
dataset attributes), with the stretches as ``stretches`` (rows of GPS start, end). The
post-processing (``merge/postprocess.py``) runs at ``commit``; GWF files of the cleaned strain
go to ``frames_dir``.

Datasets are written slice by slice into a temporary file renamed on ``commit``, so memory does
not grow with the span and a half-written file never carries the final name.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offline_iaas.atomic import (
    naming,
    remove_stale_temporaries,
    replace_directory,
    temporary_sibling,
)
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import raise_if_no_space
from offline_iaas.merge.layout import campaign_root_attrs
from offline_iaas.merge.postprocess import ShardProducts, postprocess, summarize
from offline_iaas.merge.provenance import campaign_provenance
from offline_iaas.merge.tree import StretchExtent, whole_extents
from offline_iaas.modes import output_kind, per_sample
from offline_iaas.records import BadFile, ServedModel
from offline_iaas.stretches import Stretch


class CampaignWriter:
    """Writes the campaign file stretch by stretch, slice by slice, then post-processes it.

    The rows clients send are staged in a temporary file; ``commit`` post-processes them into
    the output. The single merge and the reference write every stretch whole
    (``extents=None``); a shard merge (``merge/shard_merge.py``) writes its shard's
    ``StretchExtent``s and reads their padding.

    Parameters
    ----------
    path
        Final path; the file is written under a temporary name until ``commit``.
    config, stretches
        The campaign and all its analysable stretches.
    frames_dir
        Where the GWF files of cleaned strain (DeepClean modes) end up; ``None`` writes none.
    training
        GPS ``[start, end]`` of each network's training data (``deepclean-<IFO>``,
        ``bbhnet``; the manifest's ``training``): the physics numbers leave it out.
    model
        The served model (``products.model_record``): with the software and the config hash,
        the provenance written into the file's attributes and every GWF file.
    extents
        What this writer owns of each stretch (``merge/tree.py``); None: everything.
    bad_files
        The frame files whose spans are gaps (``data.on_bad_file = "gap"``), in the
        provenance.
    """

    def __init__(
        self, path: Path, config: CampaignConfig, stretches: list[Stretch],
        frames_dir: Path | None = None, training: dict[str, list[float]] | None = None,
        model: ServedModel | None = None, extents: list[StretchExtent] | None = None,
        bad_files: list[BadFile] | None = None,
    ) -> None:
        self.path = path
        self.config = config
        self.stretches = stretches
        self.frames_dir = frames_dir
        self.training = dict(training or {})
        self.foreground: np.ndarray | None = None
        """The foreground table (``merge/foreground.py``), set before ``commit``."""
        self.provenance = campaign_provenance(config, model, bad_files)
        self.outputs = config.outputs.names
        self.whole = extents is None
        self.extents = whole_extents(config.geometry, stretches) if extents is None else extents
        self.extent_of = {e.stretch.index: e for e in self.extents}
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        self.tmp = temporary_sibling(path)
        self.stage_path = temporary_sibling(path, "stage")
        self.frames_tmp: Path | None = None
        self.names: dict[tuple[str, int], list[str]] = {}
        """Staged datasets of each (output, stretch): the extent's ``rows``."""
        self.file: h5py.File | None = None
        self.stage: h5py.File | None = None
        try:  # a full disk may refuse either file: neither is left behind
            self.file = h5py.File(self.tmp, "w")
            self.stage = h5py.File(self.stage_path, "w")
            self._stage_datasets()
        except BaseException as err:
            self.discard()
            raise_if_no_space(err, path)  # named by its final name
            raise

    def _stage_datasets(self) -> None:
        config = self.config
        stride = config.stride_samples
        for e in self.extents:
            rows = e.rows[1] - e.rows[0]
            for output in self.outputs:
                kind = output_kind(output)  # e2e's raw-strain search: the same, suffixed
                if kind == "statistic":
                    shapes = {f"{output}/{e.stretch.index}": (rows,)}
                elif kind == "background":
                    suffix = output.removeprefix(kind)
                    shapes = {f"slides{suffix}/{e.stretch.index}": (rows, config.search.slides)}
                else:  # per sample: one series per interferometer
                    shapes = {f"{output}/{ifo}/{e.stretch.index}": (rows * stride,)
                              for ifo in config.ifos}
                for name, shape in shapes.items():
                    self.stage.create_dataset(name, shape=shape, dtype=np.float32)
                self.names[(output, e.stretch.index)] = list(shapes)

    def wanted(self, stretch: int, kept_offset: int, count: int) -> tuple[int, int]:
        """The rows ``[a, b)`` of ``count`` rows at kept window ``kept_offset`` that this
        writer stages (``a == b``: none)."""
        e = self.extent_of.get(stretch)
        if e is None:
            return kept_offset, kept_offset
        lo, hi = max(kept_offset, e.rows[0]), min(kept_offset + count, e.rows[1])
        return (lo, hi) if hi > lo else (kept_offset, kept_offset)

    def write(self, output: str, stretch: int, kept_offset: int, rows: np.ndarray) -> None:
        """Stage ``rows`` (``Outputs.rows`` layout) at kept window ``kept_offset`` of a stretch
        (the rows outside the writer's extent are dropped)."""
        lo, hi = self.wanted(stretch, kept_offset, len(rows))
        if hi <= lo:
            return
        rows = rows[lo - kept_offset : hi - kept_offset]
        at = lo - self.extent_of[stretch].rows[0]
        names = self.names[(output, stretch)]
        if not per_sample(output):
            self.stage[names[0]][at : at + len(rows)] = rows
            return
        s = self.config.stride_samples
        for i, name in enumerate(names):
            self.stage[name][at * s : (at + len(rows)) * s] = rows[:, i].ravel()

    def commit(self, attrs: dict[str, Any], frames: list | None = None) -> dict[str, Any]:
        """Post-process, add provenance, close, and give the file (and frames) their names.

        Returns the post-processing summary (``deepclean``/``bbhnet`` numbers).
        """
        products = self.postprocess(frames)
        summary = summarize(self.file, self.config, self.stretches, self.training, [products],
                            self.frames_tmp)
        self.close(attrs)
        return summary

    def postprocess(self, frames: list | None) -> ShardProducts:
        """Write the owned values, clean the strain into GWF files, cluster the triggers."""
        if self.frames_dir is not None and self.config.mode.cleans_strain:
            self.frames_tmp = temporary_sibling(self.frames_dir)
            shutil.rmtree(self.frames_tmp, ignore_errors=True)
        products = postprocess(self, frames, self.frames_tmp)
        products.foreground = self.foreground
        return products

    def close(self, attrs: dict[str, Any]) -> None:
        """Add the provenance, close, and rename the file and the frames to their names."""
        self.file.attrs.update(
            {**attrs, **campaign_root_attrs(self.config, self.stretches, self.provenance)})
        self.file.close()
        self._close_stage()
        try:
            os.replace(self.tmp, self.path)
        except OSError as err:  # named for the output, not the temporary file
            raise naming(err, self.path) from None
        if self.frames_tmp is not None:
            self.frames_tmp.mkdir(parents=True, exist_ok=True)
            replace_directory(self.frames_tmp, self.frames_dir)

    def _close_stage(self) -> None:
        if self.stage is not None and self.stage.id.valid:
            try:
                self.stage.close()
            except OSError:  # a full disk: the staged rows are deleted anyway
                pass
        self.stage_path.unlink(missing_ok=True)

    def discard(self) -> None:
        """Close and delete the temporary files (after a failure)."""
        if self.file is not None and self.file.id.valid:
            try:
                self.file.close()
            except OSError:  # its last writes fail again on a full disk: it is deleted anyway
                pass
        self._close_stage()
        self.tmp.unlink(missing_ok=True)
        if self.frames_dir is not None:
            remove_stale_temporaries(self.frames_dir)


TIME_TOLERANCE_SECONDS = 1e-6
"""Largest difference allowed in a time value (``x0``, trigger times): absolute seconds."""
TIME_COLUMNS = frozenset({"time"})
"""Table columns holding GPS times (compared in absolute seconds, not relative to ~1e9)."""
UNFORMED_NAN = frozenset({"slides"})
"""Groups whose NaN means "not formed" (a time slide whose pair lies outside the stretch)."""


@dataclass(frozen=True)
class OutputSeries:
    """One dataset of an output file, or one column of a table (``x0``/``dx`` then None)."""

    values: np.ndarray
    x0: float | None = None
    dx: float | None = None


def read_outputs(path: Path) -> dict[str, OutputSeries]:
    """Every dataset of an output file; a table's columns as ``<table>/<column>``."""
    found: dict[str, OutputSeries] = {}

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset) and item.dtype.names:  # a table (triggers)
            for column in item.dtype.names:
                found[f"{name}/{column}"] = OutputSeries(item[column])
        elif isinstance(item, h5py.Dataset):
            found[name] = OutputSeries(item[()], float(item.attrs["x0"]), float(item.attrs["dx"]))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


@dataclass
class Comparison:
    """A campaign output against a reference, dataset by dataset.

    ``relative``: max |campaign - reference| / max |reference| of each value dataset (against
    a reference of zeros: inf for any difference, 0 for none);
    ``time_seconds``: the largest absolute difference of each time value (x0, trigger times);
    ``problems``: what makes the outputs incomparable (a dataset on one side only, another
    length or ``dx``, NaN or Inf on either side). NaN never passes: every check is written so
    that a NaN makes it false. The one exception is a ``slides`` dataset's NaN, which marks a
    slide not formed: both sides must hold NaN at the same places (``UNFORMED_NAN``).
    """

    relative: dict[str, float] = field(default_factory=dict)
    time_seconds: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def worst(self) -> float:
        """The largest relative difference; inf when there is a problem, nothing was compared,
        or a time differs by more than ``TIME_TOLERANCE_SECONDS``."""
        if self.problems or not self.relative:
            return float("inf")
        if not all(t <= TIME_TOLERANCE_SECONDS for t in self.time_seconds.values()):
            return float("inf")
        return max(v if v == v else float("inf") for v in self.relative.values())

    def passes(self, tolerance: float) -> bool:
        return self.worst <= tolerance

    def describe(self) -> str:
        """One line: the problems, then every difference."""
        parts = list(self.problems)
        parts += [f"{k}={v:.3g}" for k, v in self.relative.items()]
        parts += [f"{k} {v:.3g} s" for k, v in self.time_seconds.items()]
        return ", ".join(parts)


def compare_outputs(campaign: Path, reference: Path) -> Comparison:
    """Compare every dataset of two output files (see ``Comparison``).

    Values are compared relative to the reference's largest magnitude rather than element by
    element, so values crossing zero do not blow the ratio up; time values (``x0``, the
    ``time`` column of a table) in absolute seconds, since relative to a GPS time of ~1.3e9 a
    tolerance of 1e-5 would allow hours.
    """
    ours, theirs = read_outputs(campaign), read_outputs(reference)
    result = Comparison()
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours or name not in theirs:
            side = "campaign" if name not in ours else "reference"
            result.problems.append(f"{name}: not in the {side}")
            continue
        a, b = ours[name], theirs[name]
        if a.values.shape != b.values.shape:
            result.problems.append(f"{name}: {a.values.shape} values, reference {b.values.shape}")
            continue
        if a.dx != b.dx and not (a.dx is not None and b.dx is not None
                                 and abs(a.dx - b.dx) <= 1e-9 * abs(b.dx)):
            result.problems.append(f"{name}: dx {a.dx}, reference {b.dx}")
            continue
        nan_allowed = name.split("/", 1)[0] in UNFORMED_NAN
        if nan_allowed and not np.array_equal(np.isnan(a.values), np.isnan(b.values)):
            result.problems.append(f"{name}: NaN (slides not formed) at other places than "
                                   "in the reference")
            continue
        bad = [side for side, s in (("campaign", a), ("reference", b))
               if not np.all(np.isfinite(s.values) | (nan_allowed & np.isnan(s.values)))]
        if bad:
            result.problems.append(f"{name}: NaN or Inf in the {' and '.join(bad)}")
            continue
        if a.x0 is not None and b.x0 is not None:
            result.time_seconds[f"{name}@x0"] = abs(a.x0 - b.x0)
        diff = np.abs(a.values.astype(np.float64) - b.values.astype(np.float64))
        diff[np.isnan(diff)] = 0.0  # NaN on both sides (checked above): a slide not formed
        largest = float(diff.max()) if diff.size else 0.0
        if name.rsplit("/", 1)[-1] in TIME_COLUMNS and a.x0 is None:
            result.time_seconds[name] = largest
            continue
        scale = float(np.nanmax(np.abs(b.values), initial=0.0))
        # against a reference of zeros any difference is infinitely large, none is none
        result.relative[name] = largest / scale if scale else (np.inf if largest else 0.0)
    return result


def read_campaign(path: Path, output: str = "statistic") -> list:
    """An output's stretches as gwpy TimeSeries, in time order."""
    from gwpy.timeseries import TimeSeries

    with h5py.File(path, "r") as f:
        names = sorted(f[output], key=float)
    return [TimeSeries.read(path, format="hdf5", path=f"{output}/{n}") for n in names]

