"""The model a server serves is the one ``make-dag`` recorded in ``run.json`` (each network's
version and graph SHA-256, ``export.model_record``): a repository exported again since (new
weights, a version added, which Triton would serve) is refused, so that a campaign's parts never
come from two models (``binding.py``)."""

from __future__ import annotations

from pathlib import Path

from offline_iaas.binding import model_mismatch
from offline_iaas.errors import ModelError
from offline_iaas.records import ServedModel
from offline_iaas.repository.export import MANIFEST, model_record, read_manifest


def pinned_model_problem(repository: Path, recorded: ServedModel | None) -> str | None:
    """Why ``repository`` does not serve the model ``recorded`` (one line), or None: it does,
    none was recorded, or the repository has no manifest or misses a graph (what the server's
    own check, ``export.check_repository``, says)."""
    if recorded is None or not (repository / MANIFEST).is_file():
        return None
    try:
        found = model_record(repository, read_manifest(repository))
    except (ModelError, OSError):
        return None
    mismatch = model_mismatch(recorded, found)
    if mismatch is None:
        return None
    return (f"model repository {repository} was exported again since make-dag planned this "
            f"run: it serves {mismatch}; a campaign's parts come from one model: run make-dag "
            "into a new run directory to use this one")


def check_pinned_model(repository: Path, recorded: ServedModel | None) -> None:
    """ModelError (``pinned_model_problem``'s line) unless ``repository`` serves ``recorded``."""
    problem = pinned_model_problem(repository, recorded)
    if problem is not None:
        raise ModelError(problem)
