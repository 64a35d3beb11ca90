"""A small BBHnet-shaped classifier: H1+L1 strain windows in, one statistic per window out.

Only imported by ``offline-iaas export`` (torch is the optional ``export`` extra).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from offline_iaas.config_sections import ModelConfig
from offline_iaas.errors import ModelError
from offline_iaas.models.finite_weights import refuse_non_finite_weights
from offline_iaas.models.weight_files import (
    STATE_DICT_FILE,
    read_state_dict,
    readable_weight_file,
    weight_file_kind,
)
from offline_iaas.models.weights import dtype_mismatch, key_mismatch, shape_mismatch
from offline_iaas.repository.networks import weight_file


class Classifier(nn.Module):
    """1-D CNN: scale, three strided convolutions, global average pool, linear head.

    Parameters
    ----------
    channels
        Input channels (one per interferometer).
    input_scale
        Factor applied to the raw input (strain is ~1e-21) before the first layer.
    width
        Channels of the first convolution; doubled at each of the next two.
    """

    def __init__(self, channels: int, input_scale: float = 1e21, width: int = 8) -> None:
        super().__init__()
        self.register_buffer("input_scale", torch.tensor(float(input_scale)))
        layers: list[nn.Module] = []
        size_in = channels
        for i in range(3):
            size_out = width * 2**i
            layers += [nn.Conv1d(size_in, size_out, 7, stride=2, padding=3), nn.ReLU()]
            size_in = size_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(size_in, 1)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """``windows``: [batch, channels, kernel_samples] → statistic [batch]."""
        x = self.features(windows * self.input_scale)
        return self.head(x.mean(dim=-1)).squeeze(-1)


GRAPH_FILES = {"torchscript": "a TorchScript file", "onnx": "an ONNX file"}
"""What the classifier's refusal calls a weight file of these kinds (``weight_file_kind``)."""


def classifier_network(model_section: ModelConfig, channels: int, weights: Path | None):
    """The campaign's classifier on ``channels`` streamed channels
    (``Classifier``, eval mode): seeded by ``model.seed``, or ``weights`` (a state_dict, or a
    directory holding ``classifier.pt`` as the other modes' ``--weights DIR``) loaded into it.
    ModelError for a weight file that is missing, a directory or unreadable
    (``readable_weight_file``), a TorchScript or ONNX file, or foreign: its names that differ
    (a few of each kind), its first parameter of another shape or of an integer or complex
    dtype (``weights.dtype_mismatch``: floating point is cast to float32), or a tensor holding
    NaN or Inf (``finite_weights.refuse_non_finite_weights``)."""
    torch.manual_seed(model_section.seed)
    model = Classifier(channels, input_scale=model_section.input_scale)
    if weights is not None and Path(weights).is_dir():
        weights = weight_file(weights, "classifier", single=True)
    if weights is not None:
        readable_weight_file(weights, str(weights))
        graph = GRAPH_FILES.get(weight_file_kind(Path(weights)))
        if graph is not None:  # before torch.load, which warns and advises running its code
            raise ModelError(f"{weights}: {graph}, not a state_dict: the classifier's weights are "
                             f"{STATE_DICT_FILE} (TorchScript and ONNX files are taken for the "
                             "DeepClean and BBHnet networks only)")
        state = read_state_dict(weights, str(weights), f"{weights}: not a torch state_dict")
        needed = model.state_dict()
        keys = key_mismatch(state, needed)
        if keys:  # another network's: a few of its names, not torch's list of them all
            raise ModelError(f"{weights}: not a classifier state_dict: {keys}")
        shapes = shape_mismatch(state, needed, f"{channels} channel{'s' if channels != 1 else ''}"
                                ) or dtype_mismatch(state, needed)
        if shapes:
            raise ModelError(f"{weights}: {shapes}")
        refuse_non_finite_weights(str(weights), state.items())
        model.load_state_dict(state)
    return model.eval()
