"""e2e's own graph, ``subtract``: ``windows [B, n, C, K], noise [B, ifos, n S] → cleaned
[B, ifos, n S]``. It takes the oldest stride of each window's strain (the stride DeepClean's
averaged prediction has just completed, ``K - S`` samples behind the window's end) and
subtracts the averaged prediction from it."""

from __future__ import annotations

from offline_iaas.config import CampaignConfig
from offline_iaas.mode_packages import GraphRequest
from offline_iaas.repository.networks import OPSET, Graph


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


def subtract_graphs(request: GraphRequest) -> list[Graph]:
    """e2e: the averaged prediction (not band-passed: a zero-phase band-pass needs samples
    after the stride) subtracted from the strain (no weights)."""
    import onnx

    config, out_dir = request.config, request.out_dir

    ifos = len(config.ifos)
    windows = ("windows", (-1, len(config.stream_channels), config.kernel_samples))
    path = out_dir / "subtract.onnx"
    onnx.save(subtract_onnx(config), str(path))
    outputs = ("cleaned", "strain")[: 2 if config.outputs.searches_raw_strain else 1]
    return [Graph("subtract", path, (windows, ("noise", (ifos, -1))),
                  tuple((name, (ifos, -1)) for name in outputs), batched=True)]
