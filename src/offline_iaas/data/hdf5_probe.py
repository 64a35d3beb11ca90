"""Opening HDF5 files that may be damaged: what h5py raises of one (``HDF5_DAMAGE``) as one
DataError naming the file (``readable_hdf5``), and a probe of a file's metadata whole
(``every_object``). A byte flipped in a few places crashes or hangs the HDF5 library itself,
which no Python code can catch: the files users bring, the report's output and ``inspect``'s
products are read in the frame reader's process (``gwf_reader.GwfReader.call``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from offline_iaas.errors import DataError

HDF5_DAMAGE: tuple[type[Exception], ...] = (OSError, RuntimeError, KeyError, ValueError,
                                            TypeError)
"""What h5py raises reading a damaged file, by where the damage is: the superblock or a
truncation (OSError), an attribute's or a group's metadata (RuntimeError), an object header
or a link (KeyError), a datatype no numpy type holds, or a name or string that is not UTF-8
(ValueError, UnicodeDecodeError), an unknown string encoding (TypeError)."""


@contextmanager
def readable_hdf5(path: Path) -> Iterator[None]:
    """Around the reading of the HDF5 file ``path``: what h5py raises of a damaged file
    (``HDF5_DAMAGE``) becomes one DataError line naming the file. (A byte flipped in a few
    places crashes or hangs the HDF5 library itself, which no Python code can catch: the
    files users bring are read in the frame reader's process, ``GwfReader.call``.)"""
    try:
        yield
    except HDF5_DAMAGE as err:
        detail = err.args[0] if isinstance(err, KeyError) and err.args else err
        text = " ".join(str(detail).split())
        raise DataError(f"{path}: not a readable HDF5 file: {text}") from None


def every_object(path: Path) -> dict[str, Any]:
    """Open the HDF5 file ``path``, read every object's attributes (its metadata whole) and
    return the root's; DataError naming the file where h5py cannot (``readable_hdf5``)."""
    import h5py

    def read_attributes(_: str, item: h5py.HLObject) -> None:  # None: visit on
        dict(item.attrs)

    with readable_hdf5(path), h5py.File(path, "r") as f:
        root = dict(f.attrs)
        f.visititems(read_attributes)
    return root
