"""Writing a file so that readers see either its old or its new contents, never a part."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from offline_iaas.errors import RunError, raise_if_no_space


def naming(err: OSError, path: Path) -> OSError:
    """``err`` again, of its type, naming ``path`` (what the user asked for) rather than the
    temporary file or directory it failed on. HDF5's errors name their file only in their
    text (h5py's ``strerror``, no ``filename``): their reason is then the errno's own."""
    hdf5_text = err.filename is None and err.errno is not None
    return type(err)(err.errno, os.strerror(err.errno) if hdf5_text else err.strerror, str(path))


def _names(err: BaseException, tmp: Path) -> bool:
    """Whether ``err`` is an ``OSError`` about ``tmp``: its ``filename``, or HDF5's text."""
    return isinstance(err, OSError) and (
        str(err.filename) == str(tmp) or (err.filename is None and str(tmp) in str(err)))


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """A unique temporary path beside ``path`` for the block to write; renamed over ``path``
    when the block ends, removed when it fails.

    Failures name ``path``, never the temporary file: a full disk is a ``NoSpaceError``, any
    other failure of the temporary file (a read-only directory, ``path`` a directory) an
    ``OSError`` of the same type.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):  # never created (read-only: unlink fails too)
            tmp.unlink(missing_ok=True)
        raise_if_no_space(err, path)
        if _names(err, tmp):  # name the final file
            raise naming(err, path) from None
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through ``replaced_atomically``. The temporary file is
    created with ``open(..., "x")``, so it gets the umask's mode (mkstemp would make it
    0600)."""
    with replaced_atomically(path) as tmp, open(tmp, "x") as f:
        f.write(text)


def temporary_sibling(path: Path, label: str = "") -> Path:
    """This process's temporary name beside ``path``, ``.<name>.<pid>[.<label>].tmp``, for a
    writer that fills it and renames it over ``path`` (``replace_directory`` for a directory);
    ``remove_stale_temporaries`` finds it by that pattern."""
    return path.with_name(f".{path.name}.{os.getpid()}{f'.{label}' if label else ''}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Delete ``path``'s temporary siblings (files or directories) that a killed writer left
    (``temporary_sibling``'s and ``replaced_atomically``'s names)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def replace_directory(tmp: Path, path: Path) -> None:
    """Put the directory ``tmp`` in ``path``'s place: the old one is removed first
    (``os.replace`` does not replace a directory that holds files)."""
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def output_directory(path: Path | None) -> Path | None:
    """An output directory a command is to create (None: the command's default), refused
    where it is a file (RunError, before any work; the file is left as it is)."""
    if path is not None and path.exists() and not path.is_dir():
        raise RunError(f"{path.absolute()} is a file, not a directory")
    return path
