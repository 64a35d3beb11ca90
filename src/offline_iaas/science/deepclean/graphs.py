"""DeepClean's graph: every interferometer's network in one graph, ``windows [N, C, K] →
prediction [N, ifos, K]``.

Each interferometer's network is exported from ``export --weights`` (``deepclean-<IFO>.*``; an
ONNX file is taken as given), its names prefixed, and fed by a ``Gather`` of its witnesses
out of the streamed channels; the predictions are stacked on axis 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ModelError
from offline_iaas.mode_packages import GraphRequest
from offline_iaas.repository.networks import (
    Graph,
    export_checked,
    weight_file,
    weights_digests,
)
from offline_iaas.science.deepclean import DEEPCLEAN_NETWORK
from offline_iaas.science.deepclean.settings import CANARY_NETWORK, deepclean_settings


def combined_deepclean(config: CampaignConfig, weights: Path | None, out: Path) -> Path:
    """Every interferometer's DeepClean in one graph fed by the streamed channels."""
    import onnx
    from onnx import TensorProto, compose, helper

    stream = list(config.stream_channels)
    nodes, initializers, predictions = [], [], []
    opsets: set[int] = set()
    for ifo in config.ifos:
        witnesses = config.witnesses_of(ifo)
        expected = {"witnesses": len(witnesses), "kernel_samples": config.kernel_samples}
        path = weight_file(weights, DEEPCLEAN_NETWORK.weight_stem(ifo), single=False)
        single = out.with_name(f"{out.stem}-{ifo}.onnx")
        export_checked("deepclean", path, expected, single,
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


def deepclean_graphs(request: GraphRequest) -> list[Graph]:
    """DeepClean (one graph for every detector), and its canary with ``deepclean.canary``."""
    config, weights, out_dir = request.config, request.weights, request.out_dir
    canary, wants_canary = request.canary_weights, deepclean_settings(config).canary
    if wants_canary and canary is None:  # before a graph is written
        raise ModelError("deepclean.canary = true: export needs --canary-weights (a "
                         "directory of deepclean-<IFO>.* like --weights)")
    ifos, k = len(config.ifos), config.kernel_samples
    windows = ("windows", (-1, len(config.stream_channels), k))
    per_ifo = DEEPCLEAN_NETWORK.weight_stems(config.ifos)
    graphs = [Graph("deepclean", combined_deepclean(config, weights, out_dir / "deepclean.onnx"),
                    (windows,), (("prediction", (-1, ifos, k)),),
                    weights_sha256=weights_digests(weights, per_ifo, False))]
    if wants_canary:
        path = combined_deepclean(config, canary, out_dir / f"{CANARY_NETWORK}.onnx")
        graphs.append(Graph(CANARY_NETWORK, path, (windows,), (("prediction", (-1, ifos, k)),),
                            weights_sha256=weights_digests(canary, per_ifo, False)))
    return graphs
