"""BBHnet's graph: ``windows [N, ifos, K] → statistic [N]``, exported from ``export
--weights`` (``bbhnet.*``) with its whitening FIR, or without it where the served model
whitens (``search.whitening = "rolling"``)."""

from __future__ import annotations

from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ModelError
from offline_iaas.mode_packages import GraphRequest
from offline_iaas.repository.networks import (
    Graph,
    export_checked,
    weight_file,
    weights_digests,
)
from offline_iaas.science.bbhnet import BBHNET_NETWORK


def _bbhnet(config: CampaignConfig, weights: Path | None, out: Path, single: bool) -> Path:
    ifos = len(config.ifos)
    expected = {"ifos": ifos, "kernel_samples": config.kernel_samples}
    path = weight_file(weights, "bbhnet", single)
    if not config.rolling_whitening:
        return export_checked("bbhnet", path, expected, out, (2, ifos, config.kernel_samples))
    return _export_unwhitened(config, path, expected, out)


def _export_unwhitened(config: CampaignConfig, path: Path, expected: dict, out: Path) -> Path:
    """BBHnet without its own whitening (``search.whitening = "rolling"``: the served model
    whitens): the FIR replaced by the identity and the input scale by 1, as its windows
    arrive whitened to unit variance and cropped (``bbhnet_window_samples``)."""
    import torch

    from offline_iaas.models.weights import export_onnx, load_network
    from offline_iaas.science.bbhnet.network import BBHnet

    network = load_network("bbhnet", path, expected)
    if not isinstance(network, BBHnet):
        raise ModelError(
            f"{path}: search.whitening = 'rolling' replaces BBHnet's whitening filter, which "
            "needs its weights as a state_dict (a TorchScript or ONNX graph keeps its own): "
            "give the state_dict, or use the fixed whitening")
    with torch.no_grad():
        network.whitening = torch.ones((network.ifos, 1, 1))
        network.input_scale.fill_(1.0)
    example = (2, network.ifos, bbhnet_window_samples(config))
    return export_onnx(network, out, "windows", BBHNET_NETWORK.output_name, example)


def bbhnet_window_samples(config: CampaignConfig) -> int:
    """Samples of each window BBHnet's graph takes: ``K``, less the crop of the rolling
    whitening."""
    if not config.rolling_whitening:
        return config.kernel_samples
    return config.kernel_samples - round(config.search.whitening_crop_seconds
                                         * config.data.sample_rate)


def bbhnet_graphs(request: GraphRequest) -> list[Graph]:
    """BBHnet on the strain of every detector: the stream's (mode bbhnet) or the cleaned
    strain (e2e), one row per detector either way."""
    config, weights, out_dir, single = (request.config, request.weights, request.out_dir,
                                        request.single_file)
    path = _bbhnet(config, weights, out_dir / "bbhnet.onnx", single)
    windows = ("windows", (-1, len(config.ifos), bbhnet_window_samples(config)))
    return [Graph("bbhnet", path, (windows,), (("statistic", (-1,)),),
                  weights_sha256=weights_digests(weights, ["bbhnet"], single))]
