"""The checks run before any server starts, in one ordered list (``CHECKS``) that ``check``,
``make-dag`` and ``serve`` share.

A campaign is refused as early as it can be: a fault found here costs a second at the
submit host, one found by a server or a merge costs the campaign's queue time. Each check
names the commands it runs for; a command runs its checks in the list's order. ``make-dag``
and ``serve`` stop at the first that fails, whose error type gives the exit code
(``cli.py``). ``check`` (``LISTS_EVERY_PROBLEM``) goes on after a failed check to each later
one that does not read what the failed one would have found (``Check.needs``: the injection
list needs the frames' span, so it is skipped when the frames fail; the repository needs
neither) and raises every error it met (``errors.SeveralErrors``: each printed as its own
line, the exit code the first's). The config's own checks (``config_checks.py``) come
before all of these: they run whenever a config is read, and every check needs the config.

==================  =======================  ==========  ==============  ==========================
check               commands                 raises      needs           what it refuses
==================  =======================  ==========  ==============  ==========================
``frames``          check, make-dag          DataError                   frames missing,
                                                                         unreadable, lacking a
                                                                         channel, holes in science
                                                                         time (``data/preflight``)
``injections``      check, make-dag          ConfigError ``frames``      an injection list that is
                                             DataError                   missing, unreadable or
                                                                         lacks a column
                                                                         (``injection_check``)
``repository``      check, make-dag, serve   ModelError                  a model repository that
                                                                         does not fit the campaign,
                                                                         every graph loaded
                                                                         (``export``)
``pinned model``    serve                    ModelError  ``repository``  a repository other than
                                                                         the one make-dag recorded
                                                                         in run.json (``pinning``)
``flavor``          serve                    ServerError ``repository``  a gpu flavor on a node
                                                                         without a GPU or Triton's
                                                                         onnxruntime backend
``models present``  serve                    ModelError  ``repository``  a model the node serves
                                                                         without its
                                                                         ``config.pbtxt``
==================  =======================  ==========  ==============  ==========================

Commands differ in how strict a check is, not in which comes first: ``check`` lists a hole in
science time or an unreadable file as a problem, ``make-dag`` ends a stream there
(``on_bad_file``) and, with ``--no-check``, plans from the frames' names alone and looks at
neither the injection list nor the repository; ``check`` looks at a repository only where
one exists (make-dag requires it). ``[site]`` against its profile is make-dag's own
(``workflow/profiles.resolve_site``): only make-dag writes submit files.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile, discover_frames
from offline_iaas.data.preflight import preflight
from offline_iaas.data.segments import AnalysableSpan
from offline_iaas.errors import ModelError, OfflineIaasError, ServerError, SeveralErrors
from offline_iaas.manifest import Manifest, read_manifest
from offline_iaas.records import ServedModel
from offline_iaas.repository.pinning import check_pinned_model
from offline_iaas.repository.pipeline import stages
from offline_iaas.repository.served import check_repository
from offline_iaas.search.injection_check import check_injections
from offline_iaas.serve.tritonserver import locate_tritonserver

logger = logging.getLogger(__name__)

COMMANDS = ("check", "make-dag", "serve")
LISTS_EVERY_PROBLEM = frozenset({"check"})
"""Commands that go on after a failed check to the later ones that do not need it; the
others stop at the first failure (make-dag's messages and exit codes are those of before)."""


@dataclass
class Checking:
    """One command's run through ``CHECKS``: what its checks read, and what they found."""

    command: str
    """``check``, ``make-dag`` or ``serve``."""
    config: CampaignConfig
    open_files: bool = True
    """Open the frame files and look at the injection list and repository (``make-dag
    --no-check``: False, the frames' names alone)."""
    pinned: ServedModel | None = None
    """``serve``: the model run.json records (None: a run make-dag did not plan)."""
    frames: list[FrameFile] = field(default_factory=list)
    """``frames``: the frame files found (``discover_frames``)."""
    span: AnalysableSpan | None = None
    """``frames``: the analysable span (``preflight.AnalysableSpan``)."""
    manifest: Manifest | None = None
    """``repository``: the repository's manifest, once it fits."""


@dataclass(frozen=True)
class Check:
    """One check of ``CHECKS``."""

    name: str
    commands: frozenset[str]
    run: Callable[[Checking], None]
    needs: frozenset[str] = frozenset()
    """Earlier checks whose findings this one reads: where one of them failed, it is skipped
    (it would find nothing of its own to say)."""


def _frames(checking: Checking) -> None:
    lenient = checking.command == "make-dag"  # holes in science end streams, not the campaign
    checking.frames = list(discover_frames(checking.config.data))
    checking.span = preflight(checking.config, checking.frames,
                              allow_holes_in_science=lenient, open_files=checking.open_files,
                              allow_bad_files=lenient)


def _injections(checking: Checking) -> None:
    # the merge would refuse the list after every client streamed: say so now
    if not checking.open_files or checking.span is None:
        return
    config = checking.config
    found = check_injections(config, checking.span.stretches,
                             manifest_training_spans(config.model.repository))
    if found is None:
        return
    for line in found.lines():
        logger.info(f"{checking.command}: {line}")
    for line in found.warnings():
        logger.warning(f"{checking.command}: {line}")


def _repository(checking: Checking) -> None:
    # the servers would refuse it after every client waited: say so now
    repository = checking.config.model.repository
    if not checking.open_files or (checking.command == "check" and not repository.exists()):
        return
    checking.manifest = check_repository(checking.config, load_graphs=True)


def _pinned_model(checking: Checking) -> None:
    check_pinned_model(checking.config.model.repository, checking.pinned)


def _flavor(checking: Checking) -> None:
    manifest = checking.manifest
    if manifest is None or manifest.flavor == "cpu" or checking.config.server.runtime != "native":
        return
    check_flavor_runnable(manifest.flavor, manifest.served,
                          locate_tritonserver().backend_dir, visible_gpus())


def _models_present(checking: Checking) -> None:
    check_models_present(checking.config.model.repository, served_models(checking))


CHECKS: tuple[Check, ...] = (
    Check("frames", frozenset({"check", "make-dag"}), _frames),
    Check("injections", frozenset({"check", "make-dag"}), _injections, frozenset({"frames"})),
    Check("repository", frozenset(COMMANDS), _repository),
    Check("pinned model", frozenset({"serve"}), _pinned_model, frozenset({"repository"})),
    Check("flavor", frozenset({"serve"}), _flavor, frozenset({"repository"})),
    Check("models present", frozenset({"serve"}), _models_present, frozenset({"repository"})),
)
"""In the order every command runs them."""


def run_checks(checking: Checking) -> Checking:
    """Run ``checking.command``'s checks of ``CHECKS`` in order; return what they found.

    A command of ``LISTS_EVERY_PROBLEM`` goes on after a failed check, skipping each later
    check that ``needs`` a failed one; the others stop at the first failure.

    Raises
    ------
    ConfigError, DataError, ModelError, ServerError
        The failed check's, where one failed (see the module's table).
    SeveralErrors
        ``check``: every failed check's error, in ``CHECKS``'s order, where several failed.
    """
    if checking.command not in COMMANDS:
        raise ValueError(f"no checks for command {checking.command!r} (known: {COMMANDS})")
    failed: dict[str, OfflineIaasError] = {}
    for check in CHECKS:
        if checking.command not in check.commands or check.needs & failed.keys():
            continue
        try:
            check.run(checking)
        except OfflineIaasError as error:
            if checking.command not in LISTS_EVERY_PROBLEM:
                raise
            failed[check.name] = error
    errors = list(failed.values())
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SeveralErrors(errors)
    return checking


def manifest_training_spans(repository: Path) -> dict[str, tuple[float, float]]:
    """The training spans the repository's manifest records (none when it has no manifest)."""
    try:
        return dict(read_manifest(repository).training)
    except ModelError:
        return {}


def served_models(checking: Checking) -> list[str]:
    """The models a server node serves: the manifest's, else the pipeline's stages and the
    campaign's model."""
    if checking.manifest is not None and checking.manifest.models:
        return list(checking.manifest.models)
    return [stage.model for stage in stages(checking.config)] + [checking.config.model.name]


def check_models_present(repository: Path, models: list[str]) -> None:
    """Every model the node serves has a directory with a ``config.pbtxt`` in the repository.

    Raises
    ------
    ModelError
        Naming the first missing model and where it was looked for.
    """
    for model in models:
        if not (repository / model / "config.pbtxt").is_file():
            raise ModelError(
                f"model repository {repository} has no model {model!r} (no "
                f"{repository / model / 'config.pbtxt'}); export it again with offline-iaas export"
            )


def check_flavor_runnable(
    flavor: str, served: str, backend_dir: Path | None, gpus: int
) -> None:
    """ServerError if this tritonserver cannot serve the repository's flavor.

    The gpu flavor needs a GPU; its native layout (``served`` ``ensemble``) also Triton's
    onnxruntime backend, which the embedded server lacks. ``backend_dir`` is the backend
    directory the server is started with (None: the installation's own, as in a Triton
    container, which carries every backend and finds its GPUs itself); ``gpus`` the GPUs this
    node sees (:func:`visible_gpus`).
    """
    if flavor != "gpu" or backend_dir is None:
        return
    if served == "ensemble" and not (backend_dir / "onnxruntime").is_dir():
        raise ServerError(
            f"the model repository is the gpu flavor's native layout, which needs Triton's "
            f"onnxruntime backend; this tritonserver's backends ({backend_dir}) do not have it: "
            "run the server in the Triton container (server.runtime = \"apptainer\"), or "
            "export --flavor gpu without --ensemble"
        )
    if gpus < 1:
        raise ServerError(
            "the model repository is the gpu flavor (networks on CUDA) but no GPU is visible "
            f"on {os.uname().nodename} (nvidia-smi -L): run the server on a GPU node "
            "(server.gpus >= 1), or export --flavor cpu"
        )


def visible_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists on this node (0 without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))
