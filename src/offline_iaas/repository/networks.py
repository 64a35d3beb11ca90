"""The network graphs a campaign serves: what a graph is (``Graph``), the user's weight files
(``weight_file``, ``weights_digests``), and ``build_graphs``, which asks the mode's package
(``mode_packages.py``) for the graph(s) of each network of its chain.

=============  ===================================================================================
mode           graphs (model name: inputs → outputs), built by ``science/<mode>/graphs.py``
=============  ===================================================================================
classifier     ``classifier``: windows [N, C, K] → statistic [N] (seeded weights, plumbing)
bbhnet         ``bbhnet``: windows [N, ifos, K] → statistic [N]
deepclean      ``deepclean``: windows [N, witnesses, K] → prediction [N, ifos, K]
e2e            ``deepclean``: windows [N, ifos + witnesses, K] → prediction [N, ifos, K];
               ``subtract``: windows [B, n, C, K], noise [B, ifos, n S] → cleaned [B, ifos, n S];
               ``bbhnet``: windows of cleaned strain [N, ifos, K] → statistic [N]
=============  ===================================================================================

Weights (``export --weights``): a directory holding ``deepclean-<IFO>.<ext>`` and/or
``bbhnet.<ext>`` (what ``train-demo`` writes), or for a single-network mode one file; each a
state_dict, TorchScript or ONNX file (``models/weights.py`` checks it against the campaign).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.digests import file_sha256
from offline_iaas.errors import ModelError
from offline_iaas.mode_packages import GraphRequest, mode_package, network_kind

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
    return {f.name: file_sha256(f) for f in files}


def weight_file(weights: Path | None, name: str, single: bool) -> Path:
    """The weight file of network ``name`` (``deepclean-H1``, ``bbhnet``) in ``weights``."""
    if weights is None:
        raise ModelError(
            f"this mode needs trained weights for {name}: export --weights DIR (e.g. the "
            "directory train-demo writes)"
        )
    weights = Path(weights)
    if single and weights.exists() and not weights.is_dir():  # a FIFO too: its reader refuses it
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


def export_checked(kind: str, path: Path, expected: dict, out: Path, example: tuple) -> Path:
    """Network ``kind``'s weights at ``path``, checked against ``expected``, exported to ONNX
    file ``out`` (input ``windows`` shaped like ``example``)."""
    from offline_iaas.models.weights import export_onnx, load_network

    network = load_network(kind, path, expected)
    return export_onnx(network, out, "windows", network_kind(kind).output_name, example)


def build_graphs(config: CampaignConfig, weights: Path | None, out_dir: Path,
                 canary_weights: Path | None = None) -> list[Graph]:
    """Export the mode's network graphs into ``out_dir`` (``<name>.onnx``); check weights first.

    ``canary_weights`` (with the mode section's ``canary``, DeepClean's): a second DeepClean
    per detector, exported as ``deepclean_canary``. Raises ``ModelError`` (naming the file,
    the expected and the found shapes) for weights that do not fit the campaign, before
    anything is written to the repository.
    """
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        raise ModelError(
            "export needs torch: pip install 'offline-iaas[export]' -c constraints.txt"
        ) from None
    package = mode_package(config.model.mode)
    if package is None:  # config_checks refuses an unknown mode first
        raise ModelError(f"model.mode {config.model.mode!r}: no mode package registered")
    if canary_weights is not None and not config.canary:
        asks = (f"set {config.mode_section_name}.canary = true"
                if hasattr(config.mode_section, "canary")
                else f"mode {config.model.mode!r} serves no canary")
        raise ModelError(f"--canary-weights given but the config does not ask for a canary: "
                         f"{asks}")
    # a single-network mode's weights may be that network's one file
    request = GraphRequest(config, weights, out_dir, canary_weights,
                           single_file=len(config.mode.networks) == 1)
    graphs: list[Graph] = []
    for network in config.mode.networks:  # in chain order
        graphs += package.graphs[network](request)
    return graphs
