"""The torch side of the streamed graphs, shared by every network streamed layer by layer
(``science/bbhnet/streamed.py``: BBHnet and the classifier; ``science/deepclean/streamed.py``).

A network is cut into stream layers, each an ``nn.Module`` on one array (``Layer``: a layer
without its padding, ``without_padding``, the stream supplying the neighbours), described to
the numpy runners (``backend/layer_stream.py``) by its ``Conv`` geometry (``conv_of``) and run
in torch through ``torch_run``. Weights that are not our architecture are converted to ONNX
(``onnx_for_cut``) and cut from their own operators (``streamed_foreign.py``), a failure
being a refusal (``cut_refusal``, ``cut_failures_refused``), not a crash. Every exporter
writes its runners' geometry with ``write_stream_spec``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_iaas.atomic import write_text_atomic
from offline_iaas.errors import NotStreamable
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository.backend.layer_stream import STREAM_SPEC, Conv, Run


class Layer(nn.Module):
    """``function`` of one array, owning the modules whose parameters it reads (so that
    tracing exports them as the graph's weights)."""

    def __init__(self, function: Callable[[torch.Tensor], torch.Tensor],
                 *modules: nn.Module) -> None:
        super().__init__()
        self.function = function
        self.held = nn.ModuleList(modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x)


def write_stream_spec(directory: Path, spec: dict[str, Any]) -> None:
    """``spec`` (a runner's ``spec()``, or ``spec_of``) as ``directory``'s stream spec, the
    ``streamed.json`` that ``backend/layer_stream.open_streamed`` reads."""
    write_text_atomic(directory / STREAM_SPEC, json.dumps(spec, indent=1) + "\n")


def conv_of(module: nn.Conv1d) -> Conv:
    """``module``'s geometry as a stream graph's ``Conv`` (taps, stride, padding, MACs)."""
    (taps,), (stride,), (padding,) = module.kernel_size, module.stride, module.padding
    macs = module.in_channels * module.out_channels * taps // module.groups
    return Conv(taps, stride, padding, macs)


def without_padding(module: nn.Conv1d) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` without its padding (the stream supplies the neighbours)."""
    return lambda x: nn.functional.conv1d(x, module.weight, module.bias, module.stride, 0,
                                          module.dilation, module.groups)


def torch_run(module: nn.Module) -> Run:
    """``module`` as a runner's ``Run``: numpy in, numpy out, without gradients."""
    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()

    return run


def cut_refusal(not_ours: str) -> str:
    """The start of a refusal to stream a graph ``models/recognised.py`` did not take for
    ours (``not_ours``, its reason) and whose own operators did not cut either."""
    return f"{not_ours}, and its own operators cannot be cut into stream layers"


def onnx_for_cut(loaded: Any, path: Path, scratch: Path, input_shape: tuple[int, ...],
                 output: str, where: str) -> tuple[Any, str]:
    """The ONNX graph a cut reads, and its output's name, for weights ``export`` loaded
    (``loaded`` from ``path``): an ONNX graph as it is; a TorchScript module or our network
    converted to ONNX (input ``x``, output ``y``) through ``scratch``, removed after.
    NotStreamable after ``where`` where the conversion fails."""
    import onnx

    if not isinstance(loaded, nn.Module):
        return (loaded if isinstance(loaded, onnx.ModelProto) else onnx.load(str(path))), output
    try:
        export_onnx(loaded, scratch, "x", "y", input_shape)
        return onnx.load(str(scratch)), "y"
    except Exception as err:  # noqa: BLE001 - any exporter failure is the reason
        raise NotStreamable(f"{where}: converting it to ONNX failed ({err})") from None
    finally:
        scratch.unlink(missing_ok=True)


@contextmanager
def cut_failures_refused(where: str) -> Iterator[None]:
    """Inside: any failure of a cut other than a refusal is NotStreamable after ``where``
    (a graph the cut misreads is served whole-window, not a crash)."""
    try:
        yield
    except NotStreamable:
        raise
    except Exception as err:  # noqa: BLE001 - see the docstring
        raise NotStreamable(f"{where}: cutting it failed ({type(err).__name__}: {err})"
                            ) from None
