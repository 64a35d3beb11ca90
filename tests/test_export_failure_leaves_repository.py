"""A failed ``export`` leaves the model repository as it was: everything read from the weights
directory (the training summary ``demo-models.json`` too) is checked before anything is
written, and a failure once writing began removes the version it started (Triton serves a
model's latest version directory, whatever the manifest says)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.manifest import read_manifest
from offline_iaas.repository import export as export_module
from offline_iaas.repository.export import export_repository
from offline_iaas.science.classifier.network import Classifier
from tests.error_catalogue import documented
from tests.helpers import file_hashes

PREFIX = "offline-iaas export: error: "
SPAN = {"gps_start": 1262304000, "gps_end": 1262304032}


def weights_with_summary(directory: Path, summary: str) -> Path:
    """``directory`` holding the classifier's state_dict and ``demo-models.json`` of text
    ``summary``."""
    directory.mkdir()
    torch.save(Classifier(2).state_dict(), directory / "classifier.pt")
    (directory / "demo-models.json").write_text(summary)
    return directory


def exported(root: Path, weights: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """``offline-iaas export`` of ``root``'s campaign with ``weights``: its exit code and its
    one error line's message (empty when it succeeded)."""
    capsys.readouterr()
    code = main(["export", str(root / "campaign.toml"), "--weights", str(weights)])
    lines = capsys.readouterr().err.strip().splitlines()
    if code == 0:
        return code, ""
    assert len(lines) == 1 and lines[0].startswith(PREFIX), lines  # no traceback
    return code, lines[0].removeprefix(PREFIX)


BAD_SUMMARIES = {
    "training-summary-not-one": ('{"networks": []}', "not a training summary ("),
    "training-summary-span-not-finite": (
        '{"networks": {"classifier": {"gps_start": NaN, "gps_end": 1262304032}}}',
        "networks.classifier.gps_start must be a finite GPS time, got nan"),
    "training-summary-span-reversed": (
        '{"networks": {"classifier": {"gps_start": 1262304032, "gps_end": 1262304000}}}',
        "networks.classifier: gps_start 1262304032 is not before gps_end 1262304000"),
}
"""Row id → (``demo-models.json``, what its refusal says)."""
OTHER_BAD_SUMMARIES = {
    '{"networks": "x"}': "'networks' is 'x', not an object of networks",
    '{"networks": {"classifier": {"gps_start": "yesterday", "gps_end": 1}}}':
        "networks.classifier.gps_start must be a finite GPS time, got 'yesterday'",
    '{"networks": {"classifier": {"gps_start": 1262304000, "gps_end": 1e999}}}':
        "networks.classifier.gps_end must be a finite GPS time, got inf",
    '{"networks": {"classifier": {"gps_start": true, "gps_end": 1262304032}}}':
        "got a boolean",
    '{"networks": {"classifier": {"gps_end": 1262304032}}}': "gps_start must be a finite GPS "
        "time, got nothing",
    '{"networks": {"classifier": [1, 2]}}': "networks.classifier must be an object holding "
        "gps_start and gps_end, got a list",
    '{"networks": ': "not JSON (",
}
"""Other ``demo-models.json`` refused alike (before: an AttributeError traceback, exit 1, or
exit 4 blaming the repository's manifest.json, already overwritten with the NaN)."""


def test_a_bad_training_summary_is_refused_naming_it_and_nothing_is_written(
        small_campaign_dir: Callable[..., Path], capsys: pytest.CaptureFixture) -> None:
    root = small_campaign_dir()
    repository = root / "model-repository"
    before = file_hashes(repository)
    cases = [(row, text, says) for row, (text, says) in BAD_SUMMARIES.items()]
    cases += [(None, text, says) for text, says in OTHER_BAD_SUMMARIES.items()]
    for number, (row, text, says) in enumerate(cases):
        weights = weights_with_summary(root / f"w{number}", text)
        code, message = exported(root, weights, capsys)
        assert code == exit_code(ModelError), (text, message)
        assert message.startswith(f"{weights}/demo-models.json: "), (text, message)
        assert says in message, (text, message)
        assert file_hashes(repository) == before, text
        if row is not None:
            documented(row, message, {root: "<ws>"}, exit_code=code)
    # control: a summary of finite spans, start first, is exported and recorded
    weights = weights_with_summary(root / "good", json.dumps({"networks": {"classifier": SPAN}}))
    assert exported(root, weights, capsys) == (0, "")
    manifest = read_manifest(repository)
    assert manifest.versions == {"classifier": 2}
    assert dict(manifest.training) == {"classifier": (1262304000.0, 1262304032.0)}


@pytest.mark.parametrize("ensemble", [False, True], ids=["fused", "ensemble"])
def test_a_failure_after_writing_began_leaves_no_new_version_behind(
        small_campaign_dir: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
        ensemble: bool) -> None:
    """The version directory and config.pbtxt are written before the manifest: a failure
    between them (here the manifest's file digests, as a full disk would) left version 2,
    which Triton served, beside a manifest of version 1 that ``check`` called fine."""
    root = small_campaign_dir(export=False)
    config = load_config(root / "campaign.toml")
    repository = config.model.repository
    export_repository(config, ensemble=ensemble)
    before = file_hashes(repository)

    def full_disk(*args: object) -> dict[str, str]:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(export_module, "served_files", full_disk)
        with pytest.raises(OSError, match="No space left"):
            export_repository(config, ensemble=ensemble)
        assert file_hashes(repository) == before
        assert sorted(p.name for p in repository.parent.iterdir() if p.name.startswith(".")) \
            == []  # no staging directory or temporary file left either
        # a repository that did not exist is not left half-made
        fresh = load_config(root / "campaign.toml", ['model.repository="fresh-repository"'])
        with pytest.raises(OSError, match="No space left"):
            export_repository(fresh, ensemble=ensemble)
        assert not fresh.model.repository.exists()
    # control: the same export, the disk not full, adds version 2
    export_repository(config, ensemble=ensemble)
    assert file_hashes(repository) != before
    assert max(read_manifest(repository).versions.values()) == 2
