"""Bad inputs where ``export`` reads weights (``models/weight_files.py``, ``models/weights.py``)
and writes the repository: integer or complex tensors (cast silently to float32 before), torch's
warnings beside the one error line, a FIFO or ``/dev/zero`` given as a weight file (a hang, or
memory exhausted), and a repository export cannot write (its error named a staging path)."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ModelError
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.rollback import STAGING_PREFIX
from tests.error_catalogue import cli_error, documented, documented_refusals
from tests.helpers import untrained_weights
from tests.test_own_files_not_regular import within_seconds

EXPORT_SECONDS = 120
"""Bound on one ``export`` subprocess: a FIFO's ``open`` waited for a writer for ever."""


def export_command(config_file: Path, mode: str, weights: Path, *prefix: str
                   ) -> subprocess.CompletedProcess:
    """``offline-iaas export`` of ``config_file`` in ``mode``, in a subprocess bounded by
    ``EXPORT_SECONDS`` (``prefix``: a command it runs under)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "offline_iaas.cli", "export", str(config_file),
         "--set", f'model.mode="{mode}"', "--weights", str(weights)],
        capture_output=True, text=True, timeout=EXPORT_SECONDS)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused ``export`` printed, without its prefix (asserted one line)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Warning" not in result.stderr, result.stderr
    return lines[0].removeprefix("offline-iaas export: error: ")


def bbhnet_state(weights: Path) -> dict[str, torch.Tensor]:
    return torch.load(weights / "bbhnet.pt", weights_only=True)


def test_integer_or_complex_weights_are_refused_naming_the_tensor_and_its_dtype(
        small_config_file: Path) -> None:
    """``load_state_dict`` cast them to float32 silently (complex: the imaginary part
    dropped) and export exited 0; floating point of any width is still cast and exported."""
    ws = small_config_file.parent
    config = load_config(small_config_file, ['model.mode="bbhnet"'])
    state = bbhnet_state(untrained_weights(ws / "w"))
    refusals = {}
    for dtype, error_id in ((torch.int64, "weights-dtype"), (torch.complex64, None)):
        saved = ws / str(dtype).removeprefix("torch.")
        saved.mkdir()
        torch.save({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                   saved / "bbhnet.pt")
        with pytest.raises(ModelError) as caught:
            export_repository(config, saved)
        assert str(caught.value).startswith(
            f"bbhnet weights {saved}/bbhnet.pt: tensor input_scale has dtype {dtype}, the "
            "network's is torch.float32"), caught.value
        if error_id:
            refusals[error_id] = caught
    beyond = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
    beyond["stem.0.weight"].view(-1)[0] = 1e300  # finite in float64 only
    (ws / "beyond").mkdir()
    torch.save(beyond, ws / "beyond" / "bbhnet.pt")
    with pytest.raises(ModelError, match=r"tensor stem\.0\.weight \(torch\.float64\) holds "
                       r"1e\+300, beyond the range") as refusals["weights-beyond-float32"]:
        export_repository(config, ws / "beyond")
    documented_refusals(refusals, {ws: "W"})
    assert not config.model.repository.exists()
    for dtype in (torch.float64, torch.bfloat16):  # control: floating point is cast, exported
        saved = ws / str(dtype).removeprefix("torch.")
        saved.mkdir()
        torch.save({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                   saved / "bbhnet.pt")
        export_repository(config, saved)
    export_repository(config, ws / "w")  # and float32, as before
    assert read_manifest(config.model.repository).versions == {"bbhnet": 3}


def test_classifier_weights_of_a_complex_dtype_are_refused(small_config_file: Path) -> None:
    ws = small_config_file.parent
    config = load_config(small_config_file, ['model.mode="classifier"'])
    from offline_iaas.science.classifier.network import classifier_network

    state = classifier_network(config.model, len(config.stream_channels), None).state_dict()
    torch.save({k: v.to(torch.complex64) for k, v in state.items()}, ws / "complex.pt")
    with pytest.raises(ModelError, match=f"^{ws}/complex.pt: tensor input_scale has dtype "
                       r"torch\.complex64, the network's is torch\.float32"):
        export_repository(config, ws / "complex.pt")
    torch.save({k: v.double() for k, v in state.items()}, ws / "float64.pt")
    export_repository(config, ws / "float64.pt")  # control


def test_a_refused_load_is_one_line_without_torch_warnings(small_config_file: Path) -> None:
    """A pickle that torch did not write: torch.load warned (``UserWarning: Detected pickle
    protocol 4 ...`` and the source line) before the error line, which said only "not a torch
    state_dict"; the warning's first sentence is now the refusal's reason."""
    ws = small_config_file.parent
    path = ws / "pickled.pt"
    path.write_bytes(pickle.dumps({"input_scale": 1.0}, protocol=4))
    with warnings.catch_warnings(record=True) as warned:  # control: torch itself warns
        warnings.simplefilter("always")
        with pytest.raises(Exception):  # noqa: B017 (torch's own type)
            torch.load(path, weights_only=True)
    assert any("pickle protocol 4" in str(w.message) for w in warned)
    result = export_command(small_config_file, "classifier", path)
    assert result.returncode == 4
    documented("weights-load-warned", error_line(result), {ws: "<ws>"}, exit_code=4)


def test_a_fifo_or_device_as_weights_is_refused_before_it_is_opened(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--weights FIFO`` waited for a writer for ever; ``/dev/zero`` (itself, or linked as a
    weights directory's ``bbhnet.pt``) was read until memory ran out; so was a FIFO in place
    of the directory's training summary. A device is read in a subprocess with a bound (it
    would fill this one's memory), a FIFO here under an alarm (its open would wait)."""
    ws = small_config_file.parent
    os.mkfifo(ws / "fifo")
    weights = untrained_weights(ws / "w")
    (ws / "linked").mkdir()
    os.symlink("/dev/zero", ws / "linked" / "bbhnet.pt")
    summary = weights / "demo-models.json"
    os.mkfifo(summary)
    for mode, path, said in (
            ("classifier", ws / "fifo", None),
            ("bbhnet", weights, f"{summary}: is a FIFO (named pipe), not a training summary")):
        with within_seconds(30):
            code = main(["export", str(small_config_file), "--set", f'model.mode="{mode}"',
                         "--weights", str(path)])
        line = cli_error(capsys.readouterr().err)
        assert code == 4 and (said is None or said in line), line
        if said is None:
            documented("weights-not-a-regular-file", line, {ws: "<ws>"}, exit_code=4)
    for mode, path, said in (
            ("classifier", Path("/dev/zero"), "/dev/zero: is a character device"),
            ("bbhnet", ws / "linked", f"{ws}/linked/bbhnet.pt: is a character device")):
        result = export_command(small_config_file, mode, path)
        assert result.returncode == 4 and said in error_line(result), result.stderr
    summary.unlink()  # control: the same weights, a regular file each, export (in this
    export_repository(load_config(small_config_file, ['model.mode="bbhnet"']), weights)  # one)


def permission_bits_hold() -> list[str]:
    """A command prefix under which a directory's mode stops writes: none for a user; for
    root (who writes through a mode) ``setpriv`` without CAP_DAC_OVERRIDE, or a skip."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    if shutil.which("setpriv") is None or subprocess.run(
            [*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root, whom a directory's mode does not stop, and setpriv "
                    "cannot drop CAP_DAC_OVERRIDE here")
    return prefix


def test_export_into_a_repository_it_cannot_write_names_the_repository(
        small_config_file: Path) -> None:
    """A read-only repository (and model directory): the error named the staging directory
    it renamed the new version from (``Permission denied: <ws>/tmpXXXX/fused/2 -> ...``)."""
    prefix = permission_bits_hold()
    ws = small_config_file.parent
    weights = untrained_weights(ws / "w")
    config = load_config(small_config_file, ['model.mode="bbhnet"'])
    repo = export_repository(config, weights)
    model = repo / config.model.name
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    for directory in (repo, model):
        directory.chmod(0o555)
    try:
        result = export_command(small_config_file, "bbhnet", weights, *prefix)
    finally:
        for directory in (repo, model):
            directory.chmod(0o755)
    assert result.returncode == 6
    line = error_line(result)
    assert "tmp" not in line.replace(str(ws), ""), line
    documented("export-repository-not-writable", line, {ws: "<ws>"}, exit_code=6)
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    assert not [p for p in ws.iterdir() if p.name.startswith(STAGING_PREFIX)]  # no staging left
    export_repository(config, weights)  # control: writable, it exports (in this process)
    assert read_manifest(repo).versions == {"bbhnet": 2}
