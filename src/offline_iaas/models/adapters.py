"""Adapters that fit a foreign network's output to what the campaign serves.

Only imported by ``offline-iaas export`` (torch is the optional ``export`` extra). No
``from __future__ import annotations`` here: TorchScript compiles these modules and reads their
annotations.
"""

import torch
from torch import nn


class DropLastAxis(nn.Module):
    """``inner`` with its trailing singleton output axis removed: ``[n, 1]`` → ``[n]``.

    The field's classifiers end in a class axis of one (ml4gw's ``ResNet1D``, aframe); the
    campaign's statistic is one value per window.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).squeeze(-1)


def drop_last_axis(module: nn.Module) -> torch.jit.ScriptModule:
    """``module`` (TorchScript) wrapped in :class:`DropLastAxis`, compiled."""
    return torch.jit.script(DropLastAxis(module)).eval()


def squeeze_last_axis_onnx(model, output: str):
    """An ONNX graph (``onnx.ModelProto``) whose output ``output`` loses its trailing axis of
    one: the graph's own output is renamed and a ``Squeeze`` of its last axis takes the name,
    so ``[n, 1]`` becomes ``[n]``. The ONNX counterpart of :class:`DropLastAxis`."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())  # a copy
    graph = model.graph
    raw = f"{output}_with_class_axis"
    for node in graph.node:
        node.output[:] = [raw if name == output else name for name in node.output]
        node.input[:] = [raw if name == output else name for name in node.input]
    old = next(o for o in graph.output if o.name == output)
    dims = list(old.type.tensor_type.shape.dim)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 13:  # axes became an input in opset 13
        axes = helper.make_tensor(f"{raw}_axes", onnx.TensorProto.INT64, [1], [-1])
        graph.initializer.append(axes)
        graph.node.append(helper.make_node("Squeeze", [raw, axes.name], [output]))
    else:
        graph.node.append(helper.make_node("Squeeze", [raw], [output], axes=[-1]))
    shape = [d.dim_param or d.dim_value for d in dims[:-1]]
    new = helper.make_tensor_value_info(output, old.type.tensor_type.elem_type, shape)
    graph.output.remove(old)
    graph.output.append(new)
    onnx.checker.check_model(model)
    return model
