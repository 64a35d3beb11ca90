"""A client's part of the campaign: checkpoints while streaming, one HDF5 file when complete.

While a client streams, the rows it receives are saved as **checkpoints**
``parts/<node>.checkpoints/p<piece>-<first row>-<end row>.npz`` (one array per output), each written
under a temporary name and renamed, so a killed client leaves only whole checkpoints. A retried
client resumes every piece after its last contiguous checkpoint.

When every piece is done, the checkpoints are assembled into ``parts/<node>.h5`` (datasets
``<output>/<piece>``, a row per window the piece's stream produced, warm-up included; the merge
trims it; with ``search.inject`` the foreground streams' rows as ``foreground/<output>/<j>``),
renamed into place, and then the sidecar ``parts/<node>.json`` (a
``records.PartRecord``) is written with ``complete``, the stream hash, the file's size and
SHA-256. A part complete by ``completeness.part_problem`` is never redone; a half-written,
truncated or altered one is never taken for complete.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np

from offline_iaas import records
from offline_iaas.atomic import replaced_atomically
from offline_iaas.digests import file_sha256
from offline_iaas.errors import RunError, no_space
from offline_iaas.records import (
    BadFile,
    BadFiles,
    CheckpointStamp,
    ClientRun,
    ClientShare,
    PartRecord,
    Piece,
    share_fields,
)
from offline_iaas.resources import peak_rss_mb
from offline_iaas.rundir import RunDir

CHECKPOINT_NAME = re.compile(r"p(\d+)-(\d+)-(\d+)\.npz")
FOREGROUND = "foreground"
"""The part's group of the foreground streams' rows (``search.inject``)."""

Holes = list[list[tuple[int, int]]]
"""Per piece, the rows ``[a, b)`` no stream produces (windows in a gap left by a bad frame
file, ``data.on_bad_file = "gap"``): they count as done and are NaN in the part."""


class PartWriter:
    """Saves a client's rows as checkpoints; assembles and commits the part at the end.

    Checkpoints left by an earlier attempt of the same campaign are kept and resumed from; those of
    another campaign (other config hash) or another plan are discarded. The bad frame files an
    attempt met are kept beside the checkpoints (``bad_files``), so a retry streams around them
    from the start.
    """

    def __init__(
        self, run: RunDir, share: ClientShare, outputs: tuple[str, ...], stream_hash: str,
        row_shapes: dict[str, tuple[int, ...]] | None = None,
        foreground: tuple[Piece, ...] = (),
    ) -> None:
        self.share = share
        self.foreground = foreground
        """Foreground pieces (``search.inject``), numbered after the share's pieces; their
        rows go to ``foreground/<output>/<j>`` (``j`` from 0, the stream's rows)."""
        self.outputs = outputs
        self.row_shapes = row_shapes or {}
        """Each output's row shape (``Outputs.row_shape``), for a piece that is all hole."""
        self.stream_hash = stream_hash
        self.h5_path, self.json_path = run.part(share.node)
        self.checkpoint_dir = run.checkpoints(share.node)
        self.discarded: str | None = None
        """Why the checkpoints found were discarded (their stamp damaged, or another share's),
        None when none were: the client says so in a warning."""
        identity = CheckpointStamp.of(share, stream_hash)
        stamp = self.checkpoint_dir / "share.json"
        try:
            why = "they were made for another share or stream hash"
            try:
                found = records.read_optional(CheckpointStamp, stamp)
            except RunError:  # an older offline-iaas's, or damaged: start again
                found, why = None, f"their stamp {stamp} is damaged or of another version"
            if stamp.exists() and found != identity:
                count = sum(1 for _ in self.checkpoint_dir.glob("p*.npz"))
                if count:
                    self.discarded = (f"{count} checkpoint(s) in {self.checkpoint_dir} "
                                      f"discarded ({why}): their rows are streamed again")
                shutil.rmtree(self.checkpoint_dir)
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            if not stamp.exists():
                records.write(identity, stamp)
        except OSError as err:
            raise RunError(f"{share.node}: cannot prepare {self.checkpoint_dir}: {err}") from None

    def checkpoints(self) -> dict[int, list[tuple[int, int, Path]]]:
        """Checkpoint files per piece, sorted by first row."""
        found: dict[int, list[tuple[int, int, Path]]] = {}
        for path in self.checkpoint_dir.glob("p*.npz"):
            match = CHECKPOINT_NAME.fullmatch(path.name)
            if match:
                piece, start, stop = map(int, match.groups())
                found.setdefault(piece, []).append((start, stop, path))
        return {piece: sorted(items) for piece, items in found.items()}

    def discard_damaged_checkpoints(self) -> list[tuple[Path, str]]:
        """Remove every checkpoint that cannot be read back whole (a crash or power loss
        after its rename, before its bytes reached the disk, leaves it empty or cut short):
        its rows are streamed again. Returns each removed file and why."""
        removed = []
        for piece in self.checkpoints().values():
            for start, stop, path in piece:
                why = _checkpoint_damage(path, self.outputs, stop - start)
                if why is not None:
                    path.unlink(missing_ok=True)
                    removed.append((path, why))
        return removed

    def progress(self, holes: Holes | None = None) -> list[int]:
        """Rows of each piece saved (or in a hole) contiguously from row 0 (where a retry
        resumes)."""
        done = [0] * len(self._pieces)
        checkpoints = self.checkpoints()
        for piece in range(len(done)):
            gaps = holes[piece] if holes else []
            done[piece] = _past_holes(0, gaps)
            for start, stop, _ in checkpoints.get(piece, []):
                if start <= done[piece] < stop:
                    done[piece] = _past_holes(stop, gaps)
        return done

    @property
    def _bad_files_path(self) -> Path:
        return self.checkpoint_dir / "bad-files.json"

    def bad_files(self) -> list[BadFile]:
        """The bad frame files met so far."""
        found = records.read_optional(BadFiles, self._bad_files_path)
        return list(found.files) if found is not None else []

    def add_bad_file(self, entry: BadFile, drop_from: dict[int, int]) -> None:
        """Record a bad frame file, and drop the checkpointed rows of each piece from the row
        ``drop_from`` gives it (rows near the new gap, computed before it was known)."""
        for piece, row in drop_from.items():
            for _, stop, path in self.checkpoints().get(piece, []):
                if stop > row:
                    path.unlink(missing_ok=True)
        records.write(BadFiles(files=(*self.bad_files(), entry)), self._bad_files_path)

    def write_checkpoint(self, piece: int, start: int, rows: dict[str, np.ndarray]) -> None:
        """Save rows ``[start, start + n)`` of a piece's stream, for every output."""
        count = len(next(iter(rows.values())))
        path = self.checkpoint_dir / f"p{piece}-{start}-{start + count}.npz"
        try:
            # a file object: given a name, savez would append ".npz" to the temporary's
            with replaced_atomically(path) as tmp, open(tmp, "xb") as f:
                np.savez(f, **rows)
        except OSError as err:  # a full disk, most likely
            raise (no_space(err, path) or RunError(
                f"{self.share.node}: cannot write checkpoint {path}: {err}")) from None

    def commit(self, run_record: ClientRun | None = None, holes: Holes | None = None) -> None:
        """Assemble the checkpoints into the part file (hole rows NaN), rename it, then write the
        sidecar (``run_record``: how the client ran; None: it did not stream, as in tests)."""
        if run_record is None:
            run_record = ClientRun(wall_seconds=0.0, peak_rss_mb=peak_rss_mb(), reconnects=0,
                                   first_request_unix=None, last_response_unix=None,
                                   tensor_bytes_sent=0, servers=())
        checkpoints = self.checkpoints()
        try:
            with replaced_atomically(self.h5_path) as tmp, h5py.File(tmp, "w") as f:
                for number, piece in enumerate(self._pieces):
                    gaps = holes[number] if holes else []
                    datasets: dict[str, h5py.Dataset] = {}
                    filled = _past_holes(0, gaps)
                    for start, stop, path in checkpoints.get(number, []):
                        if stop <= filled:
                            continue  # rows saved twice (a resumed attempt): keep the first
                        with np.load(path) as rows:
                            for output in self.outputs:
                                if output not in datasets:  # rows of [ifos, S] for the noise
                                    datasets[output] = self._dataset(
                                        f, output, number, piece.windows, rows[output].shape[1:])
                                datasets[output][filled:stop] = rows[output][filled - start :]
                        filled = _past_holes(stop, gaps)
                    for output in self.outputs:  # a piece all in a gap has no checkpoint
                        if output not in datasets:
                            self._dataset(f, output, number, piece.windows,
                                          self.row_shapes.get(output, ()))
                    if filled != piece.windows:
                        raise RunError(
                            f"{self.share.node}: piece {number} has {filled} of "
                            f"{piece.windows} rows checkpointed"
                        )
                f.attrs["stream_hash"] = self.stream_hash
                f.attrs["node"] = self.share.node
        except OSError as err:
            raise (no_space(err, self.h5_path) or RunError(
                f"{self.share.node}: cannot write {self.h5_path}: {err}")) from None
        sidecar = PartRecord(
            complete=True, **share_fields(self.share), **dict(run_record),
            stream_hash=self.stream_hash, outputs=self.outputs,
            sha256=file_sha256(self.h5_path), bytes=self.h5_path.stat().st_size,
            bad_files=tuple(self.bad_files()))
        records.write(sidecar, self.json_path)
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)


    @property
    def _pieces(self) -> tuple[Piece, ...]:
        return (*self.share.pieces, *self.foreground)

    def _dataset(self, f: h5py.File, output: str, number: int, windows: int,
                 row_shape: tuple[int, ...]) -> h5py.Dataset:
        background = len(self.share.pieces)
        name = (f"{output}/{number}" if number < background else
                f"{FOREGROUND}/{output}/{number - background}")
        return f.create_dataset(name, shape=(windows, *row_shape), dtype="f4", fillvalue=np.nan)


def _past_holes(row: int, holes: list[tuple[int, int]]) -> int:
    """``row``, or the end of the hole (or run of holes) it starts."""
    for a, b in sorted(holes):
        if a <= row < b:
            row = b
    return row


def read_piece_rows(
    run: RunDir, node: str, output: str, piece: int, start: int, stop: int
) -> np.ndarray:
    """Rows ``[start, stop)`` of one piece's dataset in a part."""
    with h5py.File(run.part(node)[0], "r") as f:
        return f[f"{output}/{piece}"][start:stop]


def _checkpoint_damage(path: Path, outputs: tuple[str, ...], rows: int) -> str | None:
    """Why the checkpoint ``path`` cannot give its ``rows`` rows of every output, or None."""
    try:
        with np.load(path) as saved:
            for output in outputs:
                if output not in saved.files:
                    return f"no {output}"
                if len(saved[output]) != rows:
                    return f"{len(saved[output])} rows of {output}, not {rows}"
    except (ValueError, EOFError, zipfile.BadZipFile) as err:  # not an OSError: a file
        # the filesystem cannot read now (EIO, ESTALE) is not damaged, and is kept
        return f"{type(err).__name__}: {err}"
    return None
