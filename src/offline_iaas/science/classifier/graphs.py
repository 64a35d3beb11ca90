"""The classifier's graph: ``windows [N, C, K] → statistic [N]``, seeded by ``model.seed``
or loaded from ``export --weights`` (a state_dict)."""

from __future__ import annotations

from offline_iaas.mode_packages import GraphRequest
from offline_iaas.repository.networks import Graph, weights_digests
from offline_iaas.science.classifier.network import classifier_network


def classifier_graphs(request: GraphRequest) -> list[Graph]:
    """The classifier on every streamed channel, exported as ``classifier.onnx``."""
    from offline_iaas.models.weights import export_onnx

    config, weights = request.config, request.weights
    channels, kernel = len(config.stream_channels), config.kernel_samples
    network = classifier_network(config.model, channels, weights)
    path = export_onnx(network, request.out_dir / "classifier.onnx", "windows", "statistic",
                       (2, channels, kernel))
    return [Graph("classifier", path, (("windows", (-1, channels, kernel)),),
                  (("statistic", (-1,)),),
                  weights_sha256=weights_digests(weights, ["classifier"], request.single_file))]
