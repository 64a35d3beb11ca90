"""Error types of offline-iaas.

Every failure a user can cause or meet is one of these types; the CLI maps each type to one
exit code (``EXIT_CODES``, one table) and prints its message on one line, never a traceback.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

from offline_iaas.bounded_read import NotRegularFile, refuse_unless_regular


class OfflineIaasError(Exception):
    """Base class: a failure with a message meant for the user."""


class ConfigError(OfflineIaasError):
    """The campaign configuration (file, key, value or override) is invalid."""


class DataError(OfflineIaasError):
    """Frames, caches or channels are missing, unreadable or inconsistent."""


class ModelError(OfflineIaasError):
    """A model, weight file or model repository does not match the campaign."""


class NotStreamable(ModelError):
    """Weights or a geometry the networks cannot be streamed with (``model.streamed``): true
    refuses them; ``auto`` serves the networks whole-window and logs ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(self.refusal(reason))
        self.reason = reason

    @staticmethod
    def refusal(reason: str) -> str:
        """What ``model.streamed = true`` says of ``reason`` (here and in the config check)."""
        return (f"{reason}, and model.streamed = true streams the networks: set "
                "model.streamed = \"auto\" (streams what it can) or false")


class WholeWindowLayer(NotStreamable):
    """A graph with a layer whose outputs depend on the whole window (``models/recognised.
    per_window_layer``): no one can stream it, ours or not."""


class ServerError(OfflineIaasError):
    """The inference server could not be started, reached or kept alive."""


class RunError(OfflineIaasError):
    """The run directory or a DAG node is in a state the command cannot continue from."""


class MismatchError(OfflineIaasError):
    """The campaign output differs from the in-process reference."""


class NoSpaceError(OfflineIaasError, OSError):
    """A file could not be written: its filesystem is full (or the user's quota is spent).

    Also an ``OSError`` (``errno`` ENOSPC or EDQUOT), so that a writer that goes on when a
    write fails (run-local's state file) still does.
    """


class SeveralErrors(OfflineIaasError):
    """Problems found by checks of one command that do not depend on each other (``check``:
    the frames and the model repository), each its own error, in the order found.

    The CLI prints each as it prints that error alone and exits with the first's code
    (``exit_code``): the code the command gave before it went on past a failed check.
    """

    def __init__(self, errors: Sequence[OfflineIaasError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors: tuple[OfflineIaasError, ...] = tuple(errors)
        """The errors, in the order the checks found them."""


EXIT_CODES: dict[type[OfflineIaasError], int] = {
    OfflineIaasError: 1,
    ConfigError: 2,
    DataError: 3,
    ModelError: 4,
    ServerError: 5,
    RunError: 6,
    MismatchError: 7,
    NoSpaceError: 8,
}
"""The CLI's exit code of each error type (docs/errors.md); a subtype has its nearest
parent's (``exit_code``), ``SeveralErrors`` its first error's."""


def exit_code(error: OfflineIaasError | type[OfflineIaasError]) -> int:
    """The exit code of ``error`` (an error or its type): its nearest type's in ``EXIT_CODES``;
    of ``SeveralErrors``, its first error's."""
    if isinstance(error, SeveralErrors):
        return exit_code(error.errors[0])
    kind = error if isinstance(error, type) else type(error)
    return next(EXIT_CODES[k] for k in kind.__mro__ if k in EXIT_CODES)


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errno values of a full filesystem and of a spent quota."""
ERROR_FD_ENV = "OFFLINE_IAAS_ERROR_FD"
"""Set by ``run-local`` for its nodes: a pipe the command's one error line also goes to, so
that it reaches run-local's summary when the node's own log cannot be written (a full disk)."""
_HDF5_ERRNO = re.compile(r"\berrno = (\d+)")
_HDF5_FILE = re.compile(r"\b(?:file)?name = '([^']+)'")


def no_space(err: BaseException, path: str | os.PathLike[str] | None = None,
             fallback: str | os.PathLike[str] | None = None) -> NoSpaceError | None:
    """The ``NoSpaceError`` that ``err`` stands for, or None when it is not a full disk.

    ``err`` stands for one when it, or an exception it was raised from or while handling, is
    an ``OSError`` with errno ENOSPC or EDQUOT, or carries HDF5's ``errno = 28`` in its text.
    The message is one line naming ``path`` (the file being written, best the final name
    rather than a temporary one), else the file the error names, else ``fallback`` (the
    directory written into), else none.
    """
    seen: set[int] = set()
    found: BaseException | None = err
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, NoSpaceError):  # named already, where the file was known
            return found
        text = str(found)
        code = found.errno if isinstance(found, OSError) else None
        match = _HDF5_ERRNO.search(text)
        if code not in NO_SPACE_ERRNOS and match:
            code = int(match.group(1))
        if code in NO_SPACE_ERRNOS:
            named = path
            if named is None and isinstance(found, OSError) and found.filename is not None:
                named = found.filename
            if named is None and (name := _HDF5_FILE.search(text)):
                named = name.group(1)
            named = fallback if named is None else named
            what = "disk quota exceeded" if code == errno.EDQUOT else "no space left on device"
            where = f"{os.fspath(named)}: " if named is not None else ""
            error = NoSpaceError(f"{where}{what} (free space there, then run again: "
                                 "finished nodes are not redone)")
            error.errno = code
            return error
        found = found.__cause__ or found.__context__
    return None


def raise_if_no_space(err: BaseException, path: str | os.PathLike[str]) -> None:
    """In an ``except`` clause, after the clean-up: raise the ``NoSpaceError`` naming ``path``
    that ``err`` stands for, if it is a full disk (else return, for a bare ``raise``)."""
    full = no_space(err, path)
    if full is not None:
        raise full from err


def names_text(names: Sequence[str], shown: int = 10) -> str:
    """How a message lists ``names``: the first ``shown``, and how many more."""
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def os_error_text(err: OSError) -> str:
    """One line for an OSError: what failed, and on which path(s); a file where a directory
    is wanted (``RUN/logs`` replaced by a file) is named as that."""
    in_the_way = file_in_the_way(err)
    if in_the_way is not None:
        wanted = Path(os.fsdecode(err.filename)).absolute()
        where = "" if wanted == in_the_way else f" (on the way to {wanted})"
        what = ("a symbolic link that leads nowhere (a loop, or its target is missing)"
                if not in_the_way.exists() else "a file")
        return f"{in_the_way} is {what}, not a directory{where}"
    text = str(err).strip()
    what = err.strerror or (text.splitlines()[0] if text else type(err).__name__)
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    return f"{what}: {' -> '.join(paths)}" if paths else what


def cannot_read(path: Path, err: OSError) -> str:
    """One line: ``path`` and the OS's reason it cannot be read (``Permission denied``)."""
    return f"{path}: cannot read: {err.strerror or err}"


def not_a_regular_file(path: Path) -> str | None:
    """Why ``path`` is no file to read, as a message's tail (``does not exist``, ``is a
    directory, not a regular file``, ``is a character device, not a regular file`` ...); None
    for a regular file or a link to one. ``stat`` alone
    (``bounded_read.refuse_unless_regular``): a named pipe is not opened (it would wait for a
    writer), a device not read."""
    try:
        refuse_unless_regular(path)
    except NotRegularFile as err:
        return f"is {err}"
    except FileNotFoundError:
        return "is a symbolic link that leads nowhere" if path.is_symlink() else "does not exist"
    except OSError as err:  # a parent that is a file, or one that may not be searched
        return f"cannot be read: {err.strerror or err}"
    return None


def file_in_the_way(err: OSError) -> Path | None:
    """The file (absolute) where ``err`` wanted a directory: an ``EEXIST`` (``mkdir``) or
    ``ENOTDIR`` whose path, or one of whose parents, is there but is not a directory (a file,
    or a symbolic link that leads nowhere); None for any other error (an ``EEXIST`` of a
    directory itself, or of a link's or rename's target, is reported as it is). The project
    creates files with ``O_EXCL`` only under unique temporary names, so an ``EEXIST`` naming
    one path is a ``mkdir``'s."""
    if err.errno not in (errno.EEXIST, errno.ENOTDIR) or not isinstance(err.filename,
                                                                         (str, bytes, Path)):
        return None
    if err.errno == errno.EEXIST and err.filename2 is not None:  # a link or rename's target
        return None
    wanted = Path(os.fsdecode(err.filename)).absolute()
    for path in reversed((wanted, *wanted.parents)):
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            return path
    return None
