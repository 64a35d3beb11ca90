"""An export that fails once it has begun writing leaves the repository's top two levels as
they were: no new model or version for Triton to serve, the manifest and configs unchanged.

``export`` checks every file it reads (weights, training summary) before it writes, but a
write can still fail part-way (a full disk, an interrupt, a record that does not validate).
Triton serves a model's latest version directory whatever the manifest says, so a version
left behind by a failed export would be served as if exported. ``restored_on_failure`` notes
the repository's model directories, their versions and the files export rewrites in place
(``manifest.json``, each model's ``config.pbtxt``: the files of its top two levels); on any
failure it removes what was added there and writes back what changed, then lets the failure
go on. Each entry is put back on its own; one that cannot be is named in a warning (export
again), and the rest are still put back. Files one level deeper that export rewrites in
place (the ensemble layout's stateful models' ``1/``, with the same content) are not noted.

A write that fails is named for the repository (``named_for_repository``): a read-only one
is ``model repository R: cannot write <model>/<version>: Permission denied``, never the
staging directory that the version was to be renamed from.

The networks are exported into a staging directory (``staging_place``) and renamed into the
repository, which ``os.replace`` does only within one filesystem: beside the repository, or,
where the repository is a mount point of its own (a container's bind mount, NFS, a tmpfs),
inside it where Triton does not take it for a model. Triton (control mode none) loads every
directory at the repository's top, a dot-directory too (it then does not start), but ignores a
model's version directory whose name is not a number: the staging directory is made in a model
directory, or at the top of a repository holding none yet (no manifest: nothing serves it). A
staging directory left there by an export killed part-way is removed by the next export
(``remove_stale_staging``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from offline_iaas.atomic import replaced_atomically
from offline_iaas.errors import RunError, file_in_the_way, no_space, os_error_text
from offline_iaas.manifest import MANIFEST_FILE

logger = logging.getLogger(__name__)

STAGING_PREFIX = ".export-staging-"
"""How the name of export's staging directory begins (``staging_place``)."""


def staging_place(repo: Path) -> Path:
    """The directory export makes its staging directory in (module docstring): the
    repository's parent where it is the repository's filesystem (or the repository is not made
    yet), else a model directory in the repository, else the repository itself while it holds
    no manifest (RunError with one: a staging directory left at its top would stop Triton)."""
    if not repo.is_dir() or os.stat(repo).st_dev == os.stat(repo.parent).st_dev:
        return repo.parent
    models = sorted(p for p in repo.iterdir()
                    if p.is_dir() and not p.is_symlink() and (p / "config.pbtxt").is_file())
    if models:
        return models[0]
    if (repo / MANIFEST_FILE).exists():
        raise RunError(
            f"{repo} (model.repository) is a mount point of its own and none of its models is "
            "a directory on it (links, or no config.pbtxt): export stages a new version on the "
            "repository's filesystem, in a model directory, as one left at its top would stop "
            "Triton starting; make the models directories there, or export to a new repository")
    return repo


def is_staging_directory(path: Path) -> bool:
    """Whether ``path`` is a staging directory of export's (``STAGING_PREFIX``), no link."""
    return path.name.startswith(STAGING_PREFIX) and path.is_dir() and not path.is_symlink()


def remove_stale_staging(repo: Path) -> None:
    """Delete the staging directories that an export killed part-way left in the repository
    ``repo`` (at its top or in a model directory; ``staging_place``)."""
    if not repo.is_dir():
        return
    for place in [repo, *(p for p in repo.iterdir() if p.is_dir() and not p.is_symlink())]:
        for stale in filter(is_staging_directory, place.glob(f"{STAGING_PREFIX}*")):
            shutil.rmtree(stale, ignore_errors=True)


def _top_entries(repo: Path) -> list[Path]:
    """The repository's entries and its model directories' (versions, ``config.pbtxt``)."""
    if not repo.is_dir():
        return []
    top = list(repo.iterdir())
    return top + [entry for model in top if model.is_dir() and not model.is_symlink()
                  for entry in model.iterdir()]


@contextlib.contextmanager
def restored_on_failure(repo: Path) -> Iterator[None]:
    """Run the block that writes the repository ``repo``; if it raises, put back the top two
    levels as they were (module docstring) and raise again. A repository that did not exist
    is removed."""
    existed = repo.exists()
    before = set(_top_entries(repo))
    saved = {path: path.read_bytes() for path in before if path.is_file()}
    try:
        yield
    except BaseException:
        _restore(repo, existed, before, saved)  # the failure is what the user is told
        raise


def _restore(repo: Path, existed: bool, before: set[Path], saved: dict[Path, bytes]) -> None:
    if not existed:
        shutil.rmtree(repo, ignore_errors=True)
        return
    try:
        added = sorted(set(_top_entries(repo)) - before, key=lambda p: -len(p.parts))
    except OSError as err:
        added = []
        _could_not_put_back(repo, err)
    for path in added:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as err:
            _could_not_put_back(path, err)
    for path, content in saved.items():
        try:
            if not path.is_file() or path.read_bytes() != content:
                with replaced_atomically(path) as tmp:
                    tmp.write_bytes(content)
        except OSError as err:
            _could_not_put_back(path, err)


def _could_not_put_back(path: Path, err: OSError) -> None:
    logger.warning(f"export: could not put {path} back as it was ({err}); the repository "
                   "may hold part of this export: export again")


@contextlib.contextmanager
def named_for_repository(repo: Path, staging: Path | None = None) -> Iterator[None]:
    """Run a block writing the repository ``repo`` (through ``staging``, where the networks are
    exported first, ``staging_place``): an ``OSError`` on a path in either, or on the way to
    ``repo`` (a read-only repository: a rename out of ``staging``), is a ``RunError`` naming the
    repository and its entry that could not be written, never the staging path. A full disk
    stays a ``NoSpaceError``; an error on another path goes on as it is."""
    try:
        yield
    except OSError as err:
        if no_space(err) is not None:
            raise
        top = repo.absolute()
        paths = [Path(os.fsdecode(p)).absolute() for p in (err.filename2, err.filename)
                 if isinstance(p, str | bytes | os.PathLike)]
        in_staging = [p for p in paths if staging and p.is_relative_to(staging.absolute())]
        inside = [p for p in paths if p.is_relative_to(top) and p not in (top, *in_staging)]
        if inside:
            what = inside[0].relative_to(top).as_posix()
        elif any(p == top or top.is_relative_to(p) for p in paths):
            what = "it"
        elif in_staging:
            what = f"a staging directory in {staging.parent}"
        else:
            raise
        raise cannot_write(repo, what, err) from None


def cannot_write(repo: Path, what: str, err: OSError) -> OSError | RunError:
    """The error of a failed write of ``what`` (an entry of the repository ``repo``): one line
    naming the repository, what, and the OS's reason; a full disk's ``NoSpaceError``."""
    full = no_space(err, repo)
    if full is not None:
        return full
    why = os_error_text(err) if file_in_the_way(err) is not None else err.strerror or str(err)
    return RunError(f"model repository {repo}: cannot write {what}: {why}")
