"""Weights hold finite numbers: ``export`` refuses a weight file with a NaN or Inf in any of
its floating tensors (a parameter or a buffer such as the input scale: a state_dict's and a
TorchScript file's, an ONNX graph's initialisers), naming the file and the tensor.

A network with one computes NaN or Inf for every window the value reaches; exported, it was
served and streamed the whole campaign, and the failure showed only at the merge (its parts
"hold no finite statistic").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from offline_iaas.errors import ModelError


def refuse_non_finite_weights(named: str, tensors: Iterable[tuple[str, Any]]) -> None:
    """ModelError naming the first floating tensor of ``tensors`` (``(name, tensor)`` pairs:
    torch tensors or numpy arrays) that holds NaN or Inf, how many of its values and the first
    of them; ``named`` begins the message (the file, as its caller names it). Integer and
    boolean tensors (a BatchNorm's batch count) are not looked at; a sparse or meta tensor
    (no network of ours saves one) is refused, naming it."""
    for name, tensor in tensors:
        layout = str(getattr(tensor, "layout", "torch.strided"))
        if layout != "torch.strided" or getattr(tensor, "is_meta", False):
            kind = "meta" if getattr(tensor, "is_meta", False) else layout.removeprefix("torch.")
            raise ModelError(f"{named}: tensor {name} is a {kind} tensor, not a dense one of "
                             "values: save the network's state_dict as training leaves it")
        values = _floating(tensor)
        if values is None:
            continue
        bad = ~np.isfinite(values)
        if bad.any():
            count = int(bad.sum())
            raise ModelError(
                f"{named}: tensor {name} holds {count} non-finite value"
                f"{'s' if count != 1 else ''} of {values.size} (first: {values[bad][0]}): a "
                "network with NaN or Inf weights computes NaN or Inf; export the weights of a "
                "training that did not diverge")


def onnx_initialisers(model) -> Iterable[tuple[str, np.ndarray]]:
    """The ``(name, values)`` of the ONNX ``ModelProto``'s initialisers (its weights), held
    in the graph itself (``weights.check_onnx`` refuses external data first)."""
    from onnx import numpy_helper

    for initialiser in model.graph.initializer:
        yield initialiser.name, numpy_helper.to_array(initialiser)


def _floating(tensor: Any) -> np.ndarray | None:
    """``tensor``'s values, flat, as a numpy array of floats; None for an integer or boolean
    tensor."""
    if hasattr(tensor, "is_floating_point"):  # torch (bfloat16 has no numpy type)
        if not tensor.is_floating_point():
            return None
        return tensor.detach().cpu().double().numpy().reshape(-1)  # every float exactly
    values = np.asarray(tensor)
    if not np.issubdtype(values.dtype, np.floating):
        return None
    return values.reshape(-1)
