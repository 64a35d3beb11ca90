"""Small ONNX graphs cut out of a user's graph: its operators from one tensor to another,
with the constants they read (``streamed_foreign.py`` builds its stream runs so).

onnx's own ``onnx.utils.extract_model`` keeps the source graph's tensor names and needs the
cut's input to be one of them; a stream run takes its input in another shape (a join's two
inputs concatenated along channels, the head's pooled ``[n, C]``), through operators made
here. So every tensor of the source is renamed ``v.<name>``, the run's input is ``x`` and its
output ``y``, and what is made here (``Made``) keeps the names it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

PREFIX = "v."
"""Every tensor of the source graph is renamed with this prefix."""
INPUT = "x"
"""The cut graph's input; a ``Made`` operator reads it by this name, listed in its ``kept``."""


@dataclass(frozen=True)
class Made:
    """An operator made here: ``kept`` names its tensors that are not the source graph's
    (``INPUT``, the graph's input, or made here, named by ``fresh``: not renamed);
    ``constants`` are initializers it reads, by name."""

    node: onnx.NodeProto
    kept: frozenset[str] = frozenset()
    constants: dict[str, np.ndarray] = field(default_factory=dict)


def attribute(op: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """An operator's attribute value, or ``default``."""
    found = next((a for a in op.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def has_subgraph(op: onnx.NodeProto) -> bool:
    """``op`` holds graphs (``If``, ``Loop``, ``Scan``): their tensors are not renamed."""
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in op.attribute)


def constant_value(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The value of an initializer or of a ``Constant`` operator's output, else None."""
    for initializer in model.graph.initializer:
        if initializer.name == name:
            return numpy_helper.to_array(initializer)
    for op in model.graph.node:
        if op.op_type == "Constant" and op.output[0] == name and op.attribute:
            value = helper.get_attribute_value(op.attribute[0])
            return (numpy_helper.to_array(value) if isinstance(value, TensorProto)
                    else np.asarray(value))
    return None


def subgraph(model: onnx.ModelProto, ops: list, entry: str | None, output: str,
             input_shape: list, output_rank: int) -> onnx.ModelProto:
    """A graph of ``ops`` (the source's ``NodeProto``, or ``Made``), with the constants they
    read, from input ``x`` (standing for the source tensor ``entry``, if any) to the tensor
    ``output`` (the source's, or a ``Made`` one), renamed ``y``."""
    taken = tensor_names(model)
    extra: dict[str, np.ndarray] = {}
    for op in ops:
        if isinstance(op, Made):
            clashing = sorted((op.kept | set(op.constants)) & taken - {INPUT})
            if clashing:  # ``fresh`` names them
                raise ValueError(f"names made for the cut are the graph's too: {clashing}")
            extra.update(op.constants)

    def named(name: str, made: Made | None = None) -> str:
        if not name:
            return ""
        if made is not None and name in made.kept | set(made.constants):
            return name
        return INPUT if name == entry else PREFIX + name

    body, produced = [], set()
    for op in ops:
        made = op if isinstance(op, Made) else None
        copy = onnx.NodeProto()
        copy.CopyFrom(op.node if made else op)
        copy.input[:] = [named(name, made) for name in copy.input]
        copy.output[:] = [named(name, made) for name in copy.output]
        body.append(copy)
        produced.update(copy.output)
    needed = {name for op in body for name in op.input} - produced - set(extra) - {INPUT, ""}
    initializers, constant_ops = _constants_for(model, needed)
    made_here = {name for op in ops if isinstance(op, Made) for name in op.kept}
    last = output if output in made_here else named(output)
    body = [*constant_ops, *body, helper.make_node("Identity", [last], ["y"])]
    initializers += [numpy_helper.from_array(value, name) for name, value in extra.items()]
    graph = helper.make_graph(
        body, "stream_run",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       ["batch", "y_channels", "y_samples"][:output_rank])],
        initializers)
    made = helper.make_model(graph, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version)
    onnx.checker.check_model(made)
    return made


def tensor_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor name of the graph (its operators', initializers' and inputs')."""
    graph = model.graph
    return ({name for op in graph.node for name in (*op.input, *op.output)}
            | {i.name for i in graph.initializer} | {i.name for i in graph.input})


def fresh(taken: set[str], name: str) -> str:
    """``name`` for a tensor made for the cut, with underscores ahead until ``taken`` (the
    source graph's ``tensor_names``) has none so named."""
    while name in taken:
        name = "_" + name
    return name


def _constants_for(model: onnx.ModelProto, needed: set[str]
                   ) -> tuple[list[TensorProto], list[onnx.NodeProto]]:
    """The initializers and constant-making operators that ``needed`` (renamed) come from,
    renamed so."""
    initializers = {i.name: i for i in model.graph.initializer}
    producer = {name: op for op in model.graph.node for name in op.output}
    found_initializers: list[TensorProto] = []
    found_ops: list[onnx.NodeProto] = []
    seen: set[str] = set()
    seen_ops: set[int] = set()

    def visit(name: str) -> None:
        if not name or name in seen:
            return
        seen.add(name)
        if name in initializers:
            copy = TensorProto()
            copy.CopyFrom(initializers[name])
            copy.name = PREFIX + name
            found_initializers.append(copy)
            return
        op = producer[name]
        if id(op) in seen_ops:  # another of its outputs brought it already
            return
        seen_ops.add(id(op))
        for source in op.input:
            visit(source)
        copy = onnx.NodeProto()
        copy.CopyFrom(op)
        copy.input[:] = [PREFIX + n if n else "" for n in op.input]
        copy.output[:] = [PREFIX + n for n in op.output]
        found_ops.append(copy)

    for name in sorted(name[len(PREFIX):] for name in needed):
        visit(name)
    return found_initializers, found_ops
