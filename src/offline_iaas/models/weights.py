"""User weights for DeepClean and BBHnet: load, check against the campaign, export to ONNX.

Each network kind is its mode package's (``BuiltInParts.network_kinds``): its record
(``modes.NetworkKind``, found by ``mode_packages.network_kind``) says its input rows, output
and how to build a fresh network of its architecture; this module names none of them.

Three kinds of file are accepted, told apart by content (not by name):

* a torch **state_dict** (``torch.save(model.state_dict(), path)``; read with
  ``weights_only=True`` by ``weight_files.py``): every tensor's shape and kind of number is
  compared with a freshly built network of the campaign's channel count and settings
  (``dtype_mismatch``: floating point is cast to the network's float32, float16, bfloat16 and
  float64 alike, where the values fit; an integer or complex tensor is refused, which the
  cast would make into other weights: whole numbers, or the imaginary part dropped);
* a **TorchScript** file (``torch.jit.save``): its parameters are compared the same way when
  they have the architecture's names, and it is run on a zero batch of the campaign's input
  shape whose output shape is checked;
* an **ONNX** file: its input and output names and static dimensions are compared with the
  campaign's, the batch axis must be dynamic, and it is run once with onnxruntime.

Anything else is refused with ``ModelError``, whose message names the file, the expected and
the found shapes; a path that is not a regular file, and a file pickling a whole module or
another object, are refused by ``weight_files.py`` (saying what to save instead, never
torch's advice to allow the object's code). A file of any kind with
a NaN or Inf in a floating tensor is refused naming the tensor (``finite_weights.py``), and an
ONNX graph keeping its weights in external data files (export copies one file) too.

``expected`` (a dict) describes what the campaign needs:

``deepclean``
    ``witnesses`` (int), ``kernel_samples`` (int).
``bbhnet``
    ``ifos`` (int), ``kernel_samples`` (int), ``width`` (default 8), ``depth`` (default 3),
    ``whitening_taps`` (optional: any length shorter than the kernel when absent; a fresh
    network's is as long as a trained one's at ``sample_rate_hz`` where that is given).
Both
    ``input_name`` (default ``windows``), ``output_name`` (default ``prediction`` for
    DeepClean, ``statistic`` for BBHnet).
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.atomic import replaced_atomically
from offline_iaas.errors import ModelError, names_text
from offline_iaas.mode_packages import network_kind
from offline_iaas.models.finite_weights import onnx_initialisers, refuse_non_finite_weights
from offline_iaas.models.weight_files import (
    load_torchscript,
    onnx_model,
    read_state_dict,
    readable_weight_file,
    weight_file_kind,
)

INPUT_NAME = "windows"
ONNX_OPSET = 17
"""Opset of exported graphs (what the gpu flavor's own graphs use too)."""
OTHER_FILES = ", or a TorchScript or ONNX file"
"""What DeepClean and BBHnet take beside a state_dict, as their refusals end."""
_CHECK_BATCH = 2
"""Batch size of the zero batch a TorchScript or ONNX file is run on."""


def _shape(values: Any) -> str:
    return "(" + ", ".join(str(v) for v in values) + (",)" if len(values) == 1 else ")")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def input_shape(kind: str, expected: Mapping[str, Any]) -> tuple[int, int]:
    """``(channels, kernel_samples)`` of one input window."""
    return int(expected[network_kind(kind).input_rows]), int(expected["kernel_samples"])


def output_shape(kind: str, expected: Mapping[str, Any]) -> tuple[int, ...]:
    """Shape of one window's output (without the batch axis)."""
    return (int(expected["kernel_samples"]),) if network_kind(kind).predicts_samples else ()


def names(kind: str, expected: Mapping[str, Any]) -> tuple[str, str]:
    """``(input_name, output_name)`` of the network's graph."""
    return (expected.get("input_name", INPUT_NAME),
            expected.get("output_name", network_kind(kind).output_name))


def _context(kind: str, expected: Mapping[str, Any]) -> str:
    if network_kind(kind).input_rows == "witnesses":
        n = int(expected["witnesses"])
        return f"{n} witness channel{'s' if n != 1 else ''}"
    return (
        f"{int(expected['ifos'])} interferometers, width {int(expected.get('width', 8))}, "
        f"depth {int(expected.get('depth', 3))}"
    )


def build_network(kind: str, expected: Mapping[str, Any], whitening_taps: int | None = None):
    """A freshly initialised network of the campaign's shape (placeholder statistics)."""
    return network_kind(kind).fresh(expected, whitening_taps)


def load_network(kind: str, path: Path, expected: Mapping[str, Any]):
    """Load user weights and check them against the campaign.

    Parameters
    ----------
    kind
        ``deepclean`` or ``bbhnet``.
    path
        A state_dict, TorchScript or ONNX file.
    expected
        What the campaign needs (module docstring).

    Returns
    -------
    torch.nn.Module or pathlib.Path or onnx.ModelProto
        The network in eval mode (state_dict, TorchScript), or ``path`` (ONNX, checked), or
        the ONNX graph with its output's trailing class axis of one squeezed (``[n, 1]`` for
        the campaign's ``[n]``, as TorchScript is wrapped).

    Raises
    ------
    ModelError
        If the file is missing, not a regular file, unreadable (``readable_weight_file``), not a
        model, or does not fit the campaign; the message names the file, the expected and
        the found shapes.
    """
    network_kind(kind)
    path = Path(path)
    readable_weight_file(path, f"{kind} weights {path}", OTHER_FILES)
    what = weight_file_kind(path)
    if what == "state_dict":
        return _load_state_dict(kind, path, expected)
    if what == "torchscript":
        return _load_torchscript(kind, path, expected)
    if what == "onnx":
        if check_onnx(kind, path, expected):
            from offline_iaas.models.adapters import squeeze_last_axis_onnx

            return squeeze_last_axis_onnx(onnx_model(path), names(kind, expected)[1])
        return path
    raise ModelError(f"{path} is not a torch state_dict, TorchScript or ONNX file")


def _load_state_dict(kind: str, path: Path, expected: Mapping[str, Any]):
    named = f"{kind} weights {path}"
    state = read_state_dict(
        path, named, f"{path} is not a torch state_dict, TorchScript or ONNX file", OTHER_FILES)
    model = network_for_state(kind, state, path, expected)
    refuse_non_finite_weights(named, state.items())
    model.load_state_dict(state)
    return model.eval()


def network_for_state(kind: str, state: dict, path: Path, expected: Mapping[str, Any]):
    """A fresh network with ``state``'s names and the campaign's shapes, or ModelError."""
    taps = None
    if (network_kind(kind).whitening_fir and "whitening" in state
            and state["whitening"].dim() == 3):
        taps = int(state["whitening"].shape[-1])
        kernel = int(expected["kernel_samples"])
        if taps >= kernel:
            raise ModelError(
                f"{kind} weights {path}: whitening has {taps} taps, the campaign's window "
                f"({kernel} samples) must be longer"
            )
    model = build_network(kind, expected, taps)
    compare_shapes(kind, path, state, model.state_dict(), expected)
    return model


def compare_shapes(
    kind: str, path: Path, found: Mapping[str, Any], needed: Mapping[str, Any],
    expected: Mapping[str, Any],
) -> None:
    """ModelError unless ``found`` has exactly the names and shapes of ``needed``."""
    context = _context(kind, expected)
    keys = key_mismatch(found, needed)
    if keys:
        raise ModelError(
            f"{kind} weights {path}: not a {kind} of the campaign's architecture ({context}): "
            f"{keys}"
        )
    shapes = shape_mismatch(found, needed, context) or dtype_mismatch(found, needed)
    if shapes:
        raise ModelError(f"{kind} weights {path}: {shapes}")


SHOWN_NAMES = 3
"""How many parameter names a refusal lists of each kind, before ``and N more``."""


def key_mismatch(found: Mapping[str, Any], needed: Mapping[str, Any]) -> str:
    """``missing <names>; unexpected <names>``: the parameter names of ``needed`` that
    ``found`` lacks, and those it has beyond them, a few of each (``errors.names_text``: a
    network of another architecture has dozens), layers' weights first (``_telling_first``);
    empty when the names agree."""
    missing = _telling_first([k for k in needed if k not in found])
    extra = _telling_first([k for k in found if k not in needed])
    return "; ".join(f"{what} {names_text(keys, SHOWN_NAMES)}"
                     for what, keys in (("missing", missing), ("unexpected", extra)) if keys)


def _telling_first(names: list[str]) -> list[str]:
    """``names`` with layers' weights first, each group in its order: a weight says most of
    a network (statistics and buffers come first in a state_dict's order)."""
    return sorted(names, key=lambda name: not name.endswith("weight"))


def shape_mismatch(found: Mapping[str, Any], needed: Mapping[str, Any], context: str) -> str:
    """``<name> has shape (..), the campaign needs (..) (<context>)``: the first parameter of
    ``found`` whose shape is not ``needed``'s (a layer's weight first, ``_telling_first``),
    then a few of the others; empty when every shape agrees. ``found`` has ``needed``'s names
    (``key_mismatch``)."""
    wrong = _telling_first([k for k in needed
                            if tuple(found[k].shape) != tuple(needed[k].shape)])
    if not wrong:
        return ""
    name, *others = wrong
    return (f"{name} has shape {_shape(tuple(found[name].shape))}, the campaign needs "
            f"{_shape(tuple(needed[name].shape))} ({context})"
            + (f" (also {names_text(others, SHOWN_NAMES)})" if others else ""))


def _number_kind(dtype: Any) -> str:
    """What numbers a torch ``dtype`` holds: ``complex``, ``floating point``, ``boolean`` or
    ``integer`` (a quantized dtype too)."""
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "floating point"
    return "boolean" if str(dtype) == "torch.bool" else "integer"


def dtype_mismatch(found: Mapping[str, Any], needed: Mapping[str, Any]) -> str:
    """``tensor <name> has dtype <found>, the network's is <needed> (...)``: the first tensor of
    ``found`` (torch tensors, ``needed``'s names) that is complex, or not floating point where
    ``needed``'s is (an integer weight: ``load_state_dict`` would cast either silently, to
    other weights: the imaginary part dropped, or whole numbers), or a floating one whose
    finite values overflow the network's dtype; empty when every tensor fits. Floating point
    of another width (float16, bfloat16, float64) is cast to the network's float32, and an
    integer buffer (a BatchNorm's batch count) takes any real number."""
    for name, want in needed.items():
        have = found[name]
        kind = _number_kind(want.dtype)
        if _number_kind(have.dtype) == "complex" or (
                kind == "floating point" and _number_kind(have.dtype) != kind):
            casts = "; float16, bfloat16 and float64 are cast to it" * (kind == "floating point")
            return (f"tensor {name} has dtype {have.dtype}, the network's is {want.dtype} "
                    f"({kind}{casts}): save the state_dict of the network as trained")
        if (kind == "floating point" and have.dtype != want.dtype and bool(have.isfinite().all())
                and not bool(have.to(want.dtype).isfinite().all())):
            largest = float(have.abs().max())
            return (f"tensor {name} ({have.dtype}) holds {largest:g}, beyond the range of the "
                    f"network's {want.dtype}: save the state_dict of the network as trained")
    return ""


def _load_torchscript(kind: str, path: Path, expected: Mapping[str, Any]):
    import torch

    try:
        module = load_torchscript(path)
    except Exception as err:
        raise ModelError(
            f"{path} is not a torch state_dict, TorchScript or ONNX file ({_first_line(err)})"
        ) from None
    state = dict(module.state_dict())
    fresh = build_network(kind, expected)
    if set(state) == set(fresh.state_dict()):  # our architecture: name the wrong parameter
        network_for_state(kind, state, path, expected)
    refuse_non_finite_weights(f"{kind} TorchScript {path}", state.items())
    module.eval()
    channels, kernel = input_shape(kind, expected)
    shape_in = (_CHECK_BATCH, channels, kernel)
    shape_out = (_CHECK_BATCH, *output_shape(kind, expected))
    try:
        with torch.no_grad():
            out = module(torch.zeros(shape_in))
    except Exception as err:
        raise ModelError(
            f"{kind} TorchScript {path}: fails on the campaign's input shape {_shape(shape_in)} "
            f"({_context(kind, expected)}): {_first_line(err)}"
        ) from None
    if isinstance(out, torch.Tensor) and tuple(out.shape) == (*shape_out, 1):
        # a singleton class axis, as the field's networks end (ml4gw's ResNet1D: [n, 1])
        from offline_iaas.models.adapters import drop_last_axis

        return drop_last_axis(module)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape_out:
        found = _shape(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            f"{kind} TorchScript {path}: on input {_shape(shape_in)} returns {found}, the "
            f"campaign needs {_shape(shape_out)}"
        )
    return module


def _dims(value_info) -> list[int | str]:
    out: list[int | str] = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            out.append(int(dim.dim_value))
        else:
            out.append(dim.dim_param or "?")
    return out


def check_onnx(kind: str, path: Path, expected: Mapping[str, Any]) -> bool:
    """ModelError unless the ONNX graph has the campaign's input/output names and shapes; True
    when its output has a trailing class axis of one more (``[n, 1]`` for ``[n]``: the
    field's classifiers), which ``load_network`` squeezes."""
    import onnx

    model = onnx_model(path)
    if model is None:
        raise ModelError(f"{path} is not a torch state_dict, TorchScript or ONNX file")
    external = {entry.value for tensor in model.graph.initializer
                for entry in tensor.external_data if entry.key == "location"}
    if external:  # a copy of the graph alone would lose them (export copies one file)
        raise ModelError(
            f"{kind} ONNX {path}: holds its weights as external data ({', '.join(sorted(external))}"
            "): save the graph in one file (onnx.save_model(model, path, "
            "save_as_external_data=False))")
    try:
        onnx.checker.check_model(model)
    except Exception as err:
        raise ModelError(f"{kind} ONNX {path}: invalid graph: {_first_line(err)}") from None
    refuse_non_finite_weights(f"{kind} ONNX {path}", onnx_initialisers(model))
    input_name, output_name = names(kind, expected)
    initializers = {i.name for i in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    outputs = {o.name: o for o in model.graph.output}
    if input_name not in inputs or output_name not in outputs:
        raise ModelError(
            f"{kind} ONNX {path}: has inputs {sorted(inputs)} and outputs {sorted(outputs)}, "
            f"the campaign needs input {input_name!r} and output {output_name!r}"
        )
    if len(inputs) != 1:
        raise ModelError(
            f"{kind} ONNX {path}: has inputs {sorted(inputs)}, the campaign feeds only "
            f"{input_name!r}"
        )
    channels, kernel = input_shape(kind, expected)
    wanted_out = ["batch", *output_shape(kind, expected)]
    found = _dims(outputs[output_name])
    class_axis = len(found) == len(wanted_out) + 1 and found[-1] == 1
    if class_axis:
        wanted_out = [*wanted_out, 1]
    for name, info, want in (
        (input_name, inputs[input_name], ["batch", channels, kernel]),
        (output_name, outputs[output_name], wanted_out),
    ):
        dims = _dims(info)
        fits = len(dims) == len(want) and all(
            isinstance(d, str) or d == w for d, w in zip(dims[1:], want[1:], strict=True)
        )
        if not fits:
            raise ModelError(
                f"{kind} ONNX {path}: {name!r} has shape {_shape(dims)}, the campaign needs "
                f"{_shape(want)} ({_context(kind, expected)})"
            )
        if not isinstance(dims[0], str):
            raise ModelError(
                f"{kind} ONNX {path}: {name!r} has a fixed batch size {dims[0]} "
                f"(shape {_shape(dims)}); export it with a dynamic batch axis"
            )
    _run_onnx(kind, path, expected, input_name, output_name, class_axis)
    return class_axis


def _run_onnx(
    kind: str, path: Path, expected: Mapping[str, Any], input_name: str, output_name: str,
    class_axis: bool = False,
) -> None:
    import onnxruntime

    channels, kernel = input_shape(kind, expected)
    shape_in = (_CHECK_BATCH, channels, kernel)
    shape_out = (_CHECK_BATCH, *output_shape(kind, expected), *((1,) if class_axis else ()))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        out = session.run([output_name], {input_name: np.zeros(shape_in, np.float32)})[0]
    except Exception as err:
        raise ModelError(
            f"{kind} ONNX {path}: fails on the campaign's input shape {_shape(shape_in)}: "
            f"{_first_line(err)}"
        ) from None
    if tuple(out.shape) != shape_out:
        raise ModelError(
            f"{kind} ONNX {path}: on input {_shape(shape_in)} returns {_shape(out.shape)}, the "
            f"campaign needs {_shape(shape_out)}"
        )


def export_onnx(
    module_or_path: Any,
    path: Path,
    input_name: str,
    output_name: str,
    example_shape: tuple[int, ...],
    opset: int = ONNX_OPSET,
    dynamic_time: bool = False,
) -> Path:
    """Write an ONNX graph with a dynamic batch axis (axis 0 of input and output).

    Parameters
    ----------
    module_or_path
        A torch module (``nn.Module`` or TorchScript), exported with the TorchScript-based
        exporter (``dynamo=False``); or an ONNX file or graph (from ``load_network``), written
        as it is after checking its input and output names.
    path
        Where to write (atomically: a temporary file renamed).
    input_name, output_name
        Names of the graph's input and output.
    example_shape
        Input shape used for tracing (any batch size).
    opset
        ONNX opset of an exported module (17: onnxruntime >= 1.13, Triton containers since
        22.12).
    dynamic_time
        Axis 2 (time) of the input and the output is dynamic too (exported modules only).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if _is_onnx_graph(module_or_path) or isinstance(module_or_path, str | os.PathLike):
        source = module_or_path if _is_onnx_graph(module_or_path) else Path(module_or_path)
        model = source if _is_onnx_graph(source) else onnx_model(source)
        if model is None:
            raise ModelError(f"{source} is not an ONNX file")
        graph_inputs = [i.name for i in model.graph.input]
        graph_outputs = [o.name for o in model.graph.output]
        if input_name not in graph_inputs or output_name not in graph_outputs:
            raise ModelError(
                f"ONNX {source}: has inputs {graph_inputs} and outputs {graph_outputs}, "
                f"needs input {input_name!r} and output {output_name!r}"
            )
        with replaced_atomically(path) as tmp:
            if _is_onnx_graph(source):
                import onnx

                onnx.save(source, str(tmp))
            else:
                shutil.copyfile(source, tmp)
        return path
    import torch

    module_or_path.eval()
    example = torch.zeros(example_shape)
    with replaced_atomically(path) as tmp:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    module_or_path,
                    (example,),
                    str(tmp),
                    input_names=[input_name],
                    output_names=[output_name],
                    dynamic_axes={
                        input_name: {0: "batch", **({2: "time"} if dynamic_time else {})},
                        output_name: {0: "batch", **({2: "time_out"} if dynamic_time else {})},
                    },
                    opset_version=opset,
                    dynamo=False,
                )
        except Exception as err:
            raise ModelError(f"cannot export {path} to ONNX: {_first_line(err)}") from None
    return path


def _is_onnx_graph(value: Any) -> bool:
    return type(value).__name__ == "ModelProto"

