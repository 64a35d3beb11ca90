"""A model repository's files as commands read them: its network graphs checked (onnxruntime
loads each) and hashed.

A file that is there but cannot be read (a permission, a directory where a file should be,
an I/O error) is named with the OS's reason and no remedy: exporting again gives no reader
access. A file that is missing or damaged is for ``export`` again, and its line says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from offline_iaas.digests import file_sha256
from offline_iaas.errors import ModelError, cannot_read
from offline_iaas.manifest import Manifest
from offline_iaas.repository.backend.layer_stream import open_streamed
from offline_iaas.repository.pipeline import onnx_session


def unreadable(path: Path) -> str | None:
    """``cannot_read``'s line when ``path`` is there but cannot be opened for reading; None
    when it can be, or is missing (the caller's own line: export again)."""
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return None
    except OSError as err:
        return cannot_read(path, err)


def unreadable_in(directory: Path) -> str | None:
    """``unreadable``'s line for ``directory`` when it cannot be listed, else for its first
    file that cannot be read; None when every file can be, or it is missing."""
    try:
        with os.scandir(directory) as listing:
            files = sorted(Path(e.path) for e in listing if not e.is_dir())
    except FileNotFoundError:
        return None
    except OSError as err:
        return cannot_read(directory, err)
    return next((line for path in files if (line := unreadable(path))), None)


def missing_graph(path: Path, name: str) -> str:
    """The line of network ``name``'s graph ``path`` missing from the repository."""
    return f"{path}: the {name} graph is missing: export again"


def graph_sha256(path: Path, name: str) -> str:
    """The SHA-256 of network ``name``'s graph ``path``; ModelError when it is missing
    (export again) or cannot be read (``cannot_read``)."""
    try:
        return file_sha256(path)
    except FileNotFoundError:
        raise ModelError(missing_graph(path, name)) from None
    except OSError as err:
        raise ModelError(cannot_read(path, err)) from None


def latest_version(model_dir: Path) -> int:
    """Highest numeric version directory of a model (0 when none)."""
    versions = [int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0)


def served_files(repo: Path, models: Sequence[str]) -> dict[str, str]:
    """SHA-256 of every file tritonserver reads for ``models`` (relative to ``repo``): each
    one's ``config.pbtxt`` and the files of its latest version (``__pycache__``, which the
    python backend writes there, left out)."""
    files = []
    for model in models:
        files.append(repo / model / "config.pbtxt")
        version = repo / model / str(latest_version(repo / model))
        files += [p for p in version.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return {str(p.relative_to(repo)): file_sha256(p) for p in sorted(files)}


def served_file_problems(repo: Path, manifest: Manifest) -> list[str]:
    """One line per file the manifest records (``Manifest.files``) that is missing, cannot
    be read, or was changed since the export. The network graphs are ``graph_problems``'
    (onnxruntime loads them) and, changed, the run's pinned model's (``pinning.py``: run.json
    records their SHA-256); the streamed graphs, which onnxruntime loads changed or not and
    run.json does not record, are compared with the manifest here."""
    graphs = [entry.path for entry in manifest.networks.values()]
    streamed = tuple(f"{directory}/" for directory in manifest.streamed.values())
    problems, gone = [], set()
    for relative, sha256 in manifest.files.items():
        path = repo / relative
        if relative in graphs:
            continue
        if relative.startswith(streamed):  # missing or unreadable: graph_problems' line
            if path.is_file() and unreadable(path) is None and file_sha256(path) != sha256:
                problems.append(_changed(path))
            continue
        if not path.parent.is_dir():  # a whole directory gone: one line
            if path.parent not in gone:
                gone.add(path.parent)
                problems.append(f"{path.parent}: missing from the repository (a half-copied "
                                "repository? export again)")
            continue
        if refused := unreadable(path):
            problems.append(refused)
        elif not path.is_file():
            problems.append(f"{path}: missing from the repository (a half-copied "
                            "repository? export again)")
        elif file_sha256(path) != sha256:
            problems.append(_changed(path))
    return problems


def _changed(path: Path) -> str:
    return f"{path}: changed since the export (its SHA-256 is not the manifest's): export again"


def graph_problems(repo: Path, manifest: Manifest) -> list[str]:
    """One line per network graph of the manifest (and per ``model.streamed`` directory of
    graphs) that is missing, cannot be read, or that onnxruntime refuses to load."""
    problems, missing = [], set()
    for name, entry in manifest.networks.items():
        path = repo / entry.path
        refused = unreadable(path)
        if refused:
            problems.append(refused)
            continue
        if not path.is_file():
            problems.append(missing_graph(path, name))
            missing.add(name)
            continue
        try:
            onnx_session(path)
        except Exception as err:  # onnxruntime raises its own types, with long messages
            text = str(err).strip().splitlines()
            problems.append(f"{path}: onnxruntime cannot load the {name} graph "
                            f"({text[0] if text else type(err).__name__}): a half-copied "
                            "repository? export again")
    for name, directory in manifest.streamed.items():  # model.streamed
        if name in missing:  # beside its missing graph: one line says export again
            continue
        refused = unreadable_in(repo / directory)
        if refused:
            problems.append(refused)
            continue
        try:
            open_streamed(repo / directory)
        except Exception as err:  # a missing file, or onnxruntime's own types
            text = str(err).strip().splitlines()
            problems.append(f"{repo / directory}: cannot load the streamed {name} graphs "
                            f"({text[0] if text else type(err).__name__}): export again")
    return problems
