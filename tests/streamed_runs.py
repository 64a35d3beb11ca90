"""Driving a streamed network's runner (``backend/streamed_network.py``,
``backend/streamed_deepclean.py``) the way the tests of both do: in chunks of strides, from a
checkpoint, and as the server's python stub loads it (by file path, without torch); and a
campaign exported streamed and whole-window, with both references."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from offline_iaas.config import load_config
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.backend import layer_stream
from offline_iaas.repository.export import export_repository


def randomise_batch_norms(network) -> None:
    """Every BatchNorm1d of ``network`` given random running statistics and affine terms (in
    place, from torch's seed), so that a streamed graph folding them wrongly is seen."""
    import torch

    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)


def stream(runner, samples: np.ndarray, chunks: list[int], state=None) -> np.ndarray:
    """``samples`` fed to ``runner`` ``chunks[i]`` strides at a time (cycling) from ``state``
    (a new stream's by default); its outputs, joined."""
    state = runner.initial_state() if state is None else state
    stride, out, at, i = runner.stride_samples, [], 0, 0
    while at < samples.shape[1]:
        size = chunks[i % len(chunks)] * stride
        out.append(runner.update(state, samples[:, at : at + size]))
        at, i = at + size, i + 1
    return np.concatenate(out)


def resumed_from_a_checkpoint(open_runner: Callable[[], object], from_arrays,
                              samples: np.ndarray, requests: list[int], tmp_path: Path
                              ) -> tuple[np.ndarray, np.ndarray]:
    """The outputs of one uninterrupted stream, and of the same stream saved after three
    requests (``to_arrays`` → ``numpy.savez``), loaded (``from_arrays``) and continued by a
    new runner."""
    uninterrupted = stream(open_runner(), samples, requests)
    runner = open_runner()
    state = runner.initial_state()
    split = sum(requests[:3]) * runner.stride_samples  # after three requests, mid-stream
    first = stream(runner, samples[:, :split], requests[:3], state)
    np.savez(tmp_path / "state.npz", **state.to_arrays())
    del state, runner
    with np.load(tmp_path / "state.npz") as saved:
        restored = from_arrays(saved)
    rest = stream(open_runner(), samples[:, split:], requests[3:], restored)
    with np.load(tmp_path / "state.npz") as saved:  # negative control: the rest a sample late
        late = stream(open_runner(), np.roll(samples[:, split:], 1, axis=1), requests[3:],
                      from_arrays(saved))
    assert late.shape == rest.shape and not np.array_equal(late, uninterrupted[len(first):])
    return np.concatenate([first, rest]), uninterrupted


NO_TORCH = """
import importlib.util, sys
sys.modules["torch"] = None  # any import of torch now fails
spec = importlib.util.spec_from_file_location("layer_stream", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["layer_stream"] = module  # as backend/fused.py's _load_beside
spec.loader.exec_module(module)
import numpy as np
runner = module.open_streamed(sys.argv[2])
samples = np.load(sys.argv[3])
state = runner.initial_state()
stride = runner.stride_samples
np.save(sys.argv[4], np.concatenate([runner.update(state, samples[:, a : a + 4 * stride])
                                     for a in range(0, samples.shape[1], 4 * stride)]))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "offline_iaas")))
"""


def stream_without_torch(directory: Path, samples: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The outputs of the runner of ``directory``'s graphs, in requests of 4 strides, in a
    process that loads ``layer_stream.py`` by path as the fused model does
    (``open_streamed``: the runner beside it, each copied as ``export`` copies them) and
    cannot import torch; fails if the process does or imports this package."""
    np.save(tmp_path / "samples.npy", samples)
    backend = tmp_path / "backend"
    shutil.copytree(Path(layer_stream.__file__).parent, backend,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, dotted in layer_stream.runner_modules().items():  # a mode package's own
        shutil.copy(importlib.util.find_spec(dotted).origin, backend / f"{name}.py")
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(backend / "layer_stream.py"), str(directory),
         str(tmp_path / "samples.npy"), str(tmp_path / "outputs.npy")],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['torch']"  # only the None the script put there
    return np.load(tmp_path / "outputs.npy")


def exported_both_ways(source: Path, overrides: list[str], root: Path, weights: Path,
                       **export) -> dict:
    """The campaign ``source`` with ``overrides``, exported (``export_repository`` with
    ``weights`` and ``export``) with ``model.streamed`` true (``streamed``, repository
    ``root/streamed``) and false (``whole``), and each one's reference (``streamed_out``,
    ``whole_out``: ``root/<name>.h5``)."""
    out = {}
    for name, streamed in (("streamed", "true"), ("whole", "false")):
        config = load_config(source, [*overrides, f"model.streamed={streamed}",
                                      f'model.repository="{root / name}"'])
        export_repository(config, weights, **export)
        out[name] = config
        out[f"{name}_out"] = run_reference(config, root / f"{name}.h5")[0]
    return out
