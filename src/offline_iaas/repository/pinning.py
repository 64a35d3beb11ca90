"""The model a server serves is the one ``make-dag`` recorded in ``run.json`` (each network's
version and graph SHA-256, ``served.model_record``): a repository exported again since (new
weights, a version added, which Triton would serve) or whose graphs changed is refused, so that
a campaign's parts never come from two models (``binding.py``)."""

from __future__ import annotations

from pathlib import Path

from offline_iaas.binding import model_mismatch
from offline_iaas.errors import ModelError
from offline_iaas.manifest import MANIFEST_FILE, read_manifest
from offline_iaas.records import NetworkGraph, ServedModel
from offline_iaas.repository.served import model_record


def pinned_model_problem(repository: Path, recorded: ServedModel | None, graphs: bool = True
                         ) -> str | None:
    """Why ``repository`` does not serve the model ``recorded`` (one line), or None: it does,
    none was recorded, or the repository has no manifest (not exported: the server's own
    check, ``served.check_repository``, says so). A manifest that is there but does not read
    (damaged JSON, a field missing, no regular file: a FIFO is not opened, a permission) is
    refused with ``read_manifest``'s line, as every reader of it refuses it: passed over,
    ``run-local`` started the servers that then refused it, each as often as it is retried.

    ``graphs``: compare each graph's SHA-256 too (a read of every graph; the server's check),
    not only the versions the manifest names (``run-local``'s and ``status``'s: an export adds
    a version)."""
    if recorded is None or not (repository / MANIFEST_FILE).exists():  # a link that leads
        return None  # nowhere too: no manifest
    try:
        manifest = read_manifest(repository)
        found = model_record(repository, manifest) if graphs else ServedModel(
            manifest.ensemble, manifest.flavor,
            {name: NetworkGraph(manifest.versions.get(name), "", {})
             for name in manifest.networks})
    except ModelError as err:  # its reader's line: a graph missing or unreadable too
        return str(err)
    mismatch = model_mismatch(recorded, found, graphs)
    if mismatch is None:
        return None
    return (f"model repository {repository} changed since make-dag planned this run: it serves "
            f"{mismatch}; a campaign's parts come from one model: run make-dag into a new run "
            "directory to use this one")


def check_pinned_model(repository: Path, recorded: ServedModel | None, graphs: bool = True
                       ) -> None:
    """ModelError (``pinned_model_problem``'s line) unless ``repository`` serves ``recorded``."""
    problem = pinned_model_problem(repository, recorded, graphs)
    if problem is not None:
        raise ModelError(problem)
