"""The ONNX graphs each campaign mode serves, built from the user's weights.

=============  ===================================================================================
mode           graphs (model name: inputs → outputs)
=============  ===================================================================================
classifier     ``classifier``: windows [N, C, K] → statistic [N] (seeded weights, plumbing)
bbhnet         ``bbhnet``: windows [N, ifos, K] → statistic [N]
deepclean      ``deepclean``: windows [N, witnesses, K] → prediction [N, ifos, K]
e2e            ``deepclean``: windows [N, ifos + witnesses, K] → prediction [N, ifos, K];
               ``subtract``: windows [B, n, C, K], noise [B, ifos, n S] → cleaned [B, ifos, n S];
               ``bbhnet``: windows of cleaned strain [N, ifos, K] → statistic [N]
=============  ===================================================================================

``deepclean`` runs one DeepClean per interferometer inside one graph: each interferometer's
network is exported (or taken as given, for ONNX weights), its names prefixed, and fed by a
``Gather`` of its witnesses out of the streamed channels; the predictions are stacked on axis 1.
``subtract`` takes the oldest stride of each window's strain (the stride DeepClean's averaged
prediction has just completed, ``K - S`` samples behind the window's end) and subtracts the
averaged prediction from it.

Weights (``export --weights``): a directory holding ``deepclean-<IFO>.<ext>`` and/or
``bbhnet.<ext>`` (what ``train-demo`` writes), or for a single-network mode one file; each a
state_dict, TorchScript or ONNX file (``models/weights.py`` checks it against the campaign).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import ModelConfig
from offline_iaas.errors import ModelError
from offline_iaas.mode_packages import mode_package
from offline_iaas.modes import NETWORK_KINDS
from offline_iaas.repository.pipeline import CANARY_NETWORK

WEIGHT_SUFFIXES: tuple[str, ...] = (".pt", ".pth", ".ts", ".onnx")
OPSET = 17


@dataclass(frozen=True)
class Graph:
    """One exported network graph of the repository."""

    name: str
    """Model name in the repository."""
    path: Path
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    """(tensor name, dims without the batch axes) of each input."""
    outputs: tuple[tuple[str, tuple[int, ...]], ...]
    batched: bool = False
    """True for a graph that takes Triton's batch axis itself (``subtract``)."""
    weights_sha256: dict[str, str] = field(default_factory=dict)
    """SHA-256 of each weight file the graph was exported from (file name → digest)."""


def weights_digests(weights: Path | None, names: list[str], single: bool) -> dict[str, str]:
    """SHA-256 of the weight files of networks ``names`` (none for a seeded classifier)."""
    if weights is None:
        return {}
    files = [weight_file(weights, name, single) for name in names]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def weight_file(weights: Path | None, name: str, single: bool) -> Path:
    """The weight file of network ``name`` (``deepclean-H1``, ``bbhnet``) in ``weights``."""
    if weights is None:
        raise ModelError(
            f"this mode needs trained weights for {name}: export --weights DIR (e.g. the "
            "directory train-demo writes)"
        )
    weights = Path(weights)
    if weights.is_file() and single:
        return weights
    if not weights.is_dir():
        raise ModelError(f"weights {weights}: no such directory" + (
            "" if single else f" (this mode needs several networks, {name} among them)"))
    found = sorted(p for p in weights.iterdir() if p.stem == name and p.suffix in WEIGHT_SUFFIXES)
    if len(found) != 1:
        what = "no" if not found else "more than one"
        raise ModelError(
            f"weights {weights}: {what} file for {name} (looked for {name}"
            f"{{{','.join(WEIGHT_SUFFIXES)}}})"
        )
    return found[0]


def _export_checked(kind: str, path: Path, expected: dict, out: Path, example: tuple) -> Path:
    from offline_iaas.models.weights import export_onnx, load_network

    network = load_network(kind, path, expected)
    return export_onnx(network, out, "windows", NETWORK_KINDS[kind].output_name, example)


def classifier_network(model_section: ModelConfig, channels: int, weights: Path | None):
    """The campaign's classifier on ``channels`` streamed channels
    (``models/classifier.Classifier``, eval mode): seeded by ``model.seed``, or ``weights``
    (a state_dict) loaded into it. ModelError for a missing or foreign weight file."""
    import torch

    from offline_iaas.models.classifier import Classifier

    torch.manual_seed(model_section.seed)
    model = Classifier(channels, input_scale=model_section.input_scale)
    if weights is not None:
        try:
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        except FileNotFoundError:
            raise ModelError(f"{weights}: weight file not found") from None
        except Exception as err:  # torch raises many types for a bad file
            raise ModelError(f"{weights}: not a classifier state_dict: {err}") from None
    return model.eval()


def _classifier(config: CampaignConfig, weights: Path | None, out: Path) -> Path:
    from offline_iaas.models.weights import export_onnx

    channels = len(config.stream_channels)
    return export_onnx(classifier_network(config.model, channels, weights), out, "windows",
                       "statistic", (2, channels, config.kernel_samples))


def _bbhnet(config: CampaignConfig, weights: Path | None, out: Path, single: bool) -> Path:
    ifos = len(config.ifos)
    expected = {"ifos": ifos, "kernel_samples": config.kernel_samples}
    path = weight_file(weights, "bbhnet", single)
    if not config.rolling_whitening:
        return _export_checked("bbhnet", path, expected, out, (2, ifos, config.kernel_samples))
    return _export_unwhitened(config, path, expected, out)


def _export_unwhitened(config: CampaignConfig, path: Path, expected: dict, out: Path) -> Path:
    """BBHnet without its own whitening (``bbhnet.whitening = "rolling"``: the served model
    whitens): the FIR replaced by the identity and the input scale by 1, as its windows
    arrive whitened to unit variance and cropped (``bbhnet_window_samples``)."""
    import torch

    from offline_iaas.models.bbhnet import BBHnet
    from offline_iaas.models.weights import export_onnx, load_network

    network = load_network("bbhnet", path, expected)
    if not isinstance(network, BBHnet):
        raise ModelError(
            f"{path}: bbhnet.whitening = 'rolling' replaces BBHnet's whitening filter, which "
            "needs its weights as a state_dict (a TorchScript or ONNX graph keeps its own): "
            "give the state_dict, or use the fixed whitening")
    with torch.no_grad():
        network.whitening = torch.ones((network.ifos, 1, 1))
        network.input_scale.fill_(1.0)
    example = (2, network.ifos, bbhnet_window_samples(config))
    return export_onnx(network, out, "windows", NETWORK_KINDS["bbhnet"].output_name, example)


def bbhnet_window_samples(config: CampaignConfig) -> int:
    """Samples of each window BBHnet's graph takes: ``K``, less the crop of the rolling
    whitening."""
    if not config.rolling_whitening:
        return config.kernel_samples
    return config.kernel_samples - round(config.bbhnet.whitening_crop_seconds
                                         * config.data.sample_rate)


def _deepclean(config: CampaignConfig, weights: Path | None, out: Path) -> Path:
    """Every interferometer's DeepClean in one graph fed by the streamed channels."""
    import onnx
    from onnx import TensorProto, compose, helper

    stream = list(config.stream_channels)
    nodes, initializers, predictions = [], [], []
    opsets: set[int] = set()
    for ifo in config.ifos:
        witnesses = config.witnesses_of(ifo)
        expected = {"witnesses": len(witnesses), "kernel_samples": config.kernel_samples}
        path = weight_file(weights, f"deepclean-{ifo}", single=False)
        single = out.with_name(f"{out.stem}-{ifo}.onnx")
        _export_checked("deepclean", path, expected, single,
                        (2, len(witnesses), config.kernel_samples))
        graph = compose.add_prefix(onnx.load(str(single)), f"{ifo}_")
        single.unlink()
        opsets |= {o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")}
        index = np.array([stream.index(w) for w in witnesses], dtype=np.int64)
        initializers.append(helper.make_tensor(f"{ifo}_index", TensorProto.INT64,
                                               [len(index)], index.tolist()))
        nodes.append(helper.make_node("Gather", ["windows", f"{ifo}_index"], [f"{ifo}_windows"],
                                      axis=1))
        nodes.extend(graph.graph.node)
        initializers.extend(graph.graph.initializer)
        nodes.append(helper.make_node("Unsqueeze", [f"{ifo}_prediction", "stack_axis"],
                                      [f"{ifo}_stacked"]))
        predictions.append(f"{ifo}_stacked")
    if len(opsets) != 1 or min(opsets) < 13:
        raise ModelError(f"DeepClean graphs of opsets {sorted(opsets)}: need one opset >= 13")
    initializers.append(helper.make_tensor("stack_axis", TensorProto.INT64, [1], [1]))
    nodes.append(helper.make_node("Concat", predictions, ["prediction"], axis=1))
    k = config.kernel_samples
    graph = helper.make_graph(
        nodes, "deepclean",
        [helper.make_tensor_value_info("windows", TensorProto.FLOAT, ["batch", len(stream), k])],
        [helper.make_tensor_value_info("prediction", TensorProto.FLOAT,
                                       ["batch", len(config.ifos), k])],
        initializer=initializers,
    )
    model = helper.make_model(graph, producer_name="offline-iaas",
                              opset_imports=[helper.make_operatorsetid("", opsets.pop())])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def subtract_onnx(config: CampaignConfig) -> object:
    """``cleaned = strain stride completed by the average - averaged prediction`` (batched);
    where e2e searches the raw strain too, that ``strain`` stride as a second output."""
    import onnx
    from onnx import TensorProto, helper

    stream = list(config.stream_channels)
    strain = [stream.index(ch) for ch in config.data.channels]
    s, ifos = config.stride_samples, len(config.ifos)
    constants = [
        helper.make_tensor("strain_index", TensorProto.INT64, [ifos], strain),
        helper.make_tensor("first", TensorProto.INT64, [1], [0]),
        helper.make_tensor("stride", TensorProto.INT64, [1], [s]),
        helper.make_tensor("sample_axis", TensorProto.INT64, [1], [3]),
        helper.make_tensor("flat", TensorProto.INT64, [3], [0, 0, -1]),
    ]
    node = helper.make_node
    nodes = [
        # the oldest stride of each window: [B, n, C, K] -> [B, n, C, S] -> [B, n, ifos, S]
        node("Slice", ["windows", "first", "stride", "sample_axis"], ["oldest"]),
        node("Gather", ["oldest", "strain_index"], ["strain_oldest"], axis=2),
        node("Transpose", ["strain_oldest"], ["by_ifo"], perm=[0, 2, 1, 3]),
        node("Reshape", ["by_ifo", "flat"], ["strain"]),  # [B, ifos, n * S]
        node("Sub", ["strain", "noise"], ["cleaned"]),
    ]
    k = config.kernel_samples
    graph = helper.make_graph(
        nodes, "subtract",
        [helper.make_tensor_value_info("windows", TensorProto.FLOAT,
                                       ["batch", "windows", len(stream), k]),
         helper.make_tensor_value_info("noise", TensorProto.FLOAT, ["batch", ifos, "samples"])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", ifos, "samples"])
         for name in ("cleaned", "strain")[: 2 if config.outputs.searches_raw_strain else 1]],
        initializer=constants,
    )
    model = helper.make_model(graph, producer_name="offline-iaas",
                              opset_imports=[helper.make_operatorsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def build_graphs(config: CampaignConfig, weights: Path | None, out_dir: Path,
                 canary_weights: Path | None = None) -> list[Graph]:
    """Export the mode's network graphs into ``out_dir`` (``<name>.onnx``); check weights first.

    ``canary_weights`` (with ``deepclean.canary``): a second DeepClean per detector, exported
    as ``deepclean_canary``. Raises ``ModelError`` (naming the file, the expected and the
    found shapes) for weights that do not fit the campaign, before anything is written to the
    repository.
    """
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        raise ModelError(
            "export needs torch: pip install 'offline-iaas[export]' -c constraints.txt"
        ) from None
    if config.deepclean.canary and canary_weights is None:
        raise ModelError("deepclean.canary = true: export needs --canary-weights (a "
                         "directory of deepclean-<IFO>.* like --weights)")
    if canary_weights is not None and not config.deepclean.canary:
        raise ModelError("--canary-weights given but the config does not ask for a canary: "
                         "set deepclean.canary = true")
    package = mode_package(config.model.mode)
    if package is not None:  # a mode package builds its own network's graph
        (network,) = config.mode.networks
        return list(package.graphs[network](config, weights, out_dir))
    single = len(config.mode.networks) == 1  # the weights may be that network's one file
    graphs: list[Graph] = []
    for network in config.mode.networks:  # in chain order
        graphs += _GRAPHS[network](config, weights, canary_weights, out_dir, single)
    return graphs


def _classifier_graph(config: CampaignConfig, weights: Path | None, _canary: Path | None,
                      out_dir: Path, single: bool) -> list[Graph]:
    path = _classifier(config, weights, out_dir / "classifier.onnx")
    windows = ("windows", (-1, len(config.stream_channels), config.kernel_samples))
    return [Graph("classifier", path, (windows,), (("statistic", (-1,)),),
                  weights_sha256=weights_digests(weights, ["classifier"], single))]


def _bbhnet_graph(config: CampaignConfig, weights: Path | None, _canary: Path | None,
                  out_dir: Path, single: bool) -> list[Graph]:
    """BBHnet on the strain of every detector: the stream's (mode bbhnet) or the cleaned
    strain (e2e), one row per detector either way."""
    path = _bbhnet(config, weights, out_dir / "bbhnet.onnx", single)
    windows = ("windows", (-1, len(config.ifos), bbhnet_window_samples(config)))
    return [Graph("bbhnet", path, (windows,), (("statistic", (-1,)),),
                  weights_sha256=weights_digests(weights, ["bbhnet"], single))]


def _deepclean_graphs(config: CampaignConfig, weights: Path | None, canary: Path | None,
                      out_dir: Path, _single: bool) -> list[Graph]:
    """DeepClean (one graph for every detector), and its canary with ``deepclean.canary``."""
    ifos, k = len(config.ifos), config.kernel_samples
    windows = ("windows", (-1, len(config.stream_channels), k))
    per_ifo = [f"deepclean-{ifo}" for ifo in config.ifos]
    graphs = [Graph("deepclean", _deepclean(config, weights, out_dir / "deepclean.onnx"),
                    (windows,), (("prediction", (-1, ifos, k)),),
                    weights_sha256=weights_digests(weights, per_ifo, False))]
    if config.deepclean.canary:
        path = _deepclean(config, canary, out_dir / f"{CANARY_NETWORK}.onnx")
        graphs.append(Graph(CANARY_NETWORK, path, (windows,), (("prediction", (-1, ifos, k)),),
                            weights_sha256=weights_digests(canary, per_ifo, False)))
    return graphs


def _subtract_graph(config: CampaignConfig, _weights: Path | None, _canary: Path | None,
                    out_dir: Path, _single: bool) -> list[Graph]:
    """e2e: the band-passed prediction subtracted from the strain (no weights)."""
    import onnx

    ifos = len(config.ifos)
    windows = ("windows", (-1, len(config.stream_channels), config.kernel_samples))
    path = out_dir / "subtract.onnx"
    onnx.save(subtract_onnx(config), str(path))
    outputs = ("cleaned", "strain")[: 2 if config.outputs.searches_raw_strain else 1]
    return [Graph("subtract", path, (windows, ("noise", (ifos, -1))),
                  tuple((name, (ifos, -1)) for name in outputs), batched=True)]


_GRAPHS = {"classifier": _classifier_graph, "bbhnet": _bbhnet_graph,
           "deepclean": _deepclean_graphs, "subtract": _subtract_graph}
"""Each network of ``Mode.networks``: its graph(s) in the repository."""
