"""Reading a weight file a user names, before anything checks it against the campaign
(``weights.py``): that it is a regular file that opens (not a FIFO, whose ``open`` waits for a
writer, nor ``/dev/zero``, which never ends), what kind it is by its content (a state_dict, a
TorchScript or an ONNX file), and a state_dict's tensors, loaded with ``weights_only=True`` so
that the file runs no code.

Every refusal is one ``ModelError`` line naming the file: a file pickling Python objects says
what to save instead (``pickled_objects``), never torch's advice to allow the object's code;
a zip entry failing its CRC (torch.load does not check it) is named; torch's own warnings
during the load never reach stderr (a refusal folds in the first where torch's error says
nothing of use).
"""

from __future__ import annotations

import io
import pickletools
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from offline_iaas.bounded_read import NotRegularFile, refuse_unless_regular
from offline_iaas.errors import ModelError

_REFUSED_GLOBAL = re.compile(r"\bGLOBAL (\S+)")
"""The class or function a ``weights_only`` load refused to import, in torch's message."""


def pickled_objects(path: Path, err: BaseException, named: str,
                    alternatives: str = "") -> ModelError | None:
    """The refusal of ``path``, which ``torch.load(weights_only=True)`` would not read (``err``)
    because it pickles Python objects beyond tensors: a whole module (``torch.save(model)``)
    or another object. Torch's own advice, to allow the object's class, would run the file's
    code, and weights are loaded with ``weights_only=True`` so that a file never runs any:
    the refusal says what to save instead. ``named`` begins the message (the file, as its
    caller names it); ``alternatives`` ends it (other files the caller takes). None when
    ``err`` is another failure."""
    text = str(err)
    refused = _REFUSED_GLOBAL.search(text)
    if refused is None and "add_safe_globals" not in text:
        return None
    if _pickles_a_module(path):
        held = "a pickled torch module (torch.save(model))"
    elif refused is not None:
        held = f"a pickled Python object ({refused.group(1)})"
    else:
        held = "pickled Python objects"
    return ModelError(
        f"{named}: holds {held}, not a state_dict (weights are loaded with weights_only=True, "
        "which runs no code from the file): save torch.save(model.state_dict(), path) "
        f"instead{alternatives}"
    )


def _pickles_a_module(path: Path) -> bool:
    """Whether the object ``path`` pickles (torch's zip or legacy format) has an
    ``nn.Module``'s attributes (``_modules``, ``_parameters``); read as opcodes, never run."""
    strings: set[str] = set()
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                entry = next(e for e in archive.namelist() if e.endswith("/data.pkl"))
                pickles, count = io.BytesIO(archive.read(entry)), 1
        else:  # legacy: magic number, protocol, system info, then the object (then tensors)
            pickles, count = io.BytesIO(Path(path).read_bytes()), 4
        for _ in range(count):
            strings.update(arg for _, arg, _ in pickletools.genops(pickles)
                           if isinstance(arg, str))
    except Exception:  # not a pickle torch wrote: nothing more to say of it
        return False
    return {"_modules", "_parameters"} <= strings


STATE_DICT_FILE = "a state_dict saved with torch.save(model.state_dict(), path)"
"""What a weight file is, as a refusal says it (a mode may take other files beside it)."""


def readable_weight_file(path: Path, named: str, alternatives: str = "") -> None:
    """ModelError unless ``path`` is a regular file that opens for reading, one line beginning
    ``named`` (the file, as its caller names it): not found, a directory, a FIFO or a device
    (``bounded_read.refuse_unless_regular``: ``STATE_DICT_FILE`` expected, then
    ``alternatives``; refused before it is opened, which a FIFO's would wait on and
    ``/dev/zero``'s never end), or the OS's reason (a permission), never a load's "not a
    state_dict"."""
    try:
        refuse_unless_regular(path)
        with open(path, "rb"):
            return
    except NotRegularFile as err:
        raise ModelError(f"{named}: is {err.kind}, not a weight file "
                         f"({STATE_DICT_FILE}{alternatives})") from None
    except FileNotFoundError:
        raise ModelError(f"{named}: weight file not found") from None
    except OSError as err:
        raise ModelError(f"{named}: cannot read: {err.strerror or err}") from None


def load_torchscript(path: Path) -> Any:
    """``torch.jit.load`` of ``path`` on the CPU, torch's warnings held: a refusal is the one
    line its caller gives (a loaded graph is checked by running it)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.load(str(path), map_location="cpu")


def load_error_cause(err: BaseException) -> str:
    """`` (<why>)``: the most specific line of a torch.load error (its first line is generic
    advice); empty where torch says nothing of use (an empty file: an EOFError with no text;
    a file of text: a KeyError of its first byte's value)."""
    if isinstance(err, (EOFError, KeyError)):
        return ""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    specific = [line for line in lines if line.startswith("WeightsUnpickler error:")]
    if specific:
        return f" ({specific[0]})"
    if not lines or lines[0].startswith("Weights only load failed"):
        return ""  # generic advice to load untrusted pickles: no help here
    return f" ({lines[0]})"


def weight_file_kind(path: Path) -> str:
    """``state_dict``, ``torchscript``, ``onnx`` or ``unknown`` from the file's content."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                entries = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return "unknown"
        if any("/code/" in e or e.endswith("/constants.pkl") for e in entries):
            return "torchscript"
        if any(e.endswith("/data.pkl") for e in entries):
            return "state_dict"
        return "unknown"
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":  # a pickle: torch's legacy (non-zip) serialization
        return "state_dict"
    if onnx_model(path) is not None:
        return "onnx"
    return "unknown"


def onnx_model(path: Path):
    """The ONNX ModelProto of ``path``, or None when it is not one."""
    import onnx

    try:  # external data (its weights in other files) refused by check_onnx, not read
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    if model.ir_version <= 0 or not model.graph.node or not model.graph.output:
        return None
    return model


def read_state_dict(path: Path, named: str, not_a_save: str, alternatives: str = "") -> dict:
    """The state_dict ``path`` holds (a training checkpoint's ``"state_dict"`` unwrapped),
    loaded with ``weights_only=True``. ModelError for a file pickling Python objects
    (``pickled_objects``, ending ``alternatives``), for one torch cannot load (``not_a_save``
    and torch's reason, or its first warning where the error says nothing: ``warned_cause``)
    and for a save that is not a mapping of names to tensors (beginning ``named``: the file,
    as its caller names it). Torch's warnings during the load are held, never printed (a
    loaded file's tensors are checked by the caller: names, shapes, dtypes, finite values).
    The tensors keep the file's dtypes (``weights.dtype_mismatch`` refuses an integer or a
    complex one where the network's is floating point)."""
    import torch

    try:  # torch's zip format keeps a CRC per entry, which torch.load does not check
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError):  # not a zip, or cut: torch.load's line below
        damaged = None
    if damaged is not None:
        raise ModelError(f"{named}: damaged: {damaged} fails its CRC (changed since it was saved)")
    with warnings.catch_warnings(record=True) as warned:  # the refusal is the one line
        warnings.simplefilter("always")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises many types for a bad file
            refusal = pickled_objects(path, err, named, alternatives)
            if refusal is not None:
                raise refusal from None
            cause = load_error_cause(err) or warned_cause(warned)
            raise ModelError(f"{not_a_save}{cause}") from None
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]  # training checkpoints wrap it
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ModelError(f"{named}: not a state_dict (a mapping of parameter names to tensors)")
    return dict(state)


def warned_cause(warned: list[warnings.WarningMessage]) -> str:
    """`` (<why>)``: the first sentence of the first warning torch gave while failing to load
    a file (``Detected pickle protocol 4 in the checkpoint, ...``: a pickle torch did not
    write), for a refusal whose error says nothing of use; empty without one."""
    for warning in warned:
        text = " ".join(str(warning.message).split())
        if text:
            return f" ({text.split('. ')[0].rstrip('.')})"
    return ""
