"""The bench's workloads: campaign configs of each mode, with seeded weights.

A workload is what a campaign of one mode streams and serves: its ``CampaignConfig`` (so
``export`` writes the repository campaigns serve, and ``pipeline.mode_stream`` runs the same
step in-process) and seeded, untrained weights for its networks (throughput does not depend on
training). A workload marked ``streamed`` serves its networks streamed layer by layer
(``model.streamed``, issue #42: every mode's; the gpu flavor's fused model streams alike); the
others (``tiny``) run them on whole windows.

``toy``        classifier mode: H1+L1 at 2048 Hz, 4 s windows at 4 Hz (the campaign's padded
               3-layer CNN), batch 32, streamed
``deepclean``  deepclean mode: 21 witnesses of H1 at 2048 Hz, 1 s windows at 32 Hz, batch 32,
               streamed
``o3-deepclean`` the DeepClean configuration of O3 reprocessing
               (``workflow/o3-month-deepclean.toml``): H1's 21 witnesses streamed at
               4096 Hz (the strain is subtracted in the merge), 1 s windows at 32 Hz,
               batch 32; on the cpu and the gpu flavor alike, streamed
``bbhnet``     bbhnet mode: H1+L1 at 2048 Hz, 1.5 s windows at 4 Hz, batch 128, streamed
``aframe``     ``bbhnet`` at aframe's own geometry: 1.5 s windows at 16 Hz (``K/S`` 24),
               batch 128, streamed
``e2e``        e2e mode: H1+L1 and 21 witnesses each at 2048 Hz, 1 s windows at 32 Hz, batch 32
               (DeepClean, subtraction and BBHnet chained), streamed
``e2e-inject`` the e2e graph a campaign with ``search.inject`` serves: ``e2e`` with BBHnet run
               a second time on the raw strain (``statistic_raw``); its background stream
               only (``plan`` counts the foreground's windows itself)
``tiny``       classifier mode on a short, low-rate stream, for the regression check (on
               whole windows: the path its recorded baseline measured)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.errors import ConfigError
from offline_iaas.mode_packages import find_mode
from offline_iaas.modes import Mode

SAMPLE_BYTES = 4
"""float32 on the wire."""
IFOS: tuple[str, ...] = ("H1", "L1")
STRAIN_SCALE = 1e-21
"""The synthetic strain's scale (the networks' ``input_scale`` undoes it)."""


@dataclass(frozen=True)
class Workload:
    """A campaign mode at one stream geometry.

    Parameters
    ----------
    name
        Workload name.
    mode_name
        The campaign mode it serves (``model.mode``; ``mode`` is its record).
    ifos
        Interferometers (one strain channel each).
    witnesses_per_ifo
        Witness channels of each interferometer (DeepClean modes).
    sample_rate_hz, kernel_seconds, inference_rate_hz
        Model rate, window length and windows per second of data.
    batch_size
        Windows per request at the default point.
    inject
        ``search.inject``: in e2e the served graph also searches the raw strain
        (``pipeline.searches_raw_strain``); the bench streams the background only.
    streamed
        ``model.streamed``: the networks streamed layer by layer; the bench then also serves
        the same weights whole-window (the ``whole-window`` path).
    """

    name: str
    mode_name: str
    ifos: tuple[str, ...]
    witnesses_per_ifo: int
    sample_rate_hz: float
    kernel_seconds: float
    inference_rate_hz: float
    batch_size: int
    inject: bool = False
    streamed: bool = False

    def config(self, repository: Path, instances: int = 2, clients: int = 2,
               batch_size: int | None = None, streamed: bool | None = None) -> CampaignConfig:
        """The campaign config of this workload, its repository at ``repository``
        (``streamed``: ``model.streamed``, the workload's own setting unless given)."""
        witnesses = [f"{ifo}:PEM-BENCH_WITNESS_{i}" for ifo in self.ifos
                     for i in range(self.witnesses_per_ifo)]
        raw = {
            "data": {
                "channels": [f"{ifo}:GDS-CALIB_STRAIN" for ifo in self.ifos],
                "witnesses": witnesses, "start": 1262304000, "duration": 4096,
                "sample_rate": self.sample_rate_hz, "frames": str(repository.parent),
            },
            "model": {
                "repository": str(repository), "mode": self.mode_name, "name": "offline-iaas",
                "kernel_seconds": self.kernel_seconds, "inference_rate": self.inference_rate_hz,
                "batch_size": batch_size or self.batch_size,
                "streamed": self.streamed if streamed is None else streamed,
            },
            "layout": {"servers": 1, "clients_per_server": clients},
            "server": {"instances": instances},
            # the set is never read: the bench streams the background only
            **({"search": {"inject": True, "injections": str(repository.parent / "set.json")}}
               if self.inject else {}),
        }
        return config_from_dict(raw, repository.parent / f"{self.name}.toml")

    @property
    def mode(self) -> Mode:
        return find_mode(self.mode_name)

    @property
    def searches_raw_strain(self) -> bool:
        """Its served graph runs BBHnet on the raw strain too (e2e with ``inject``)."""
        return self.inject and self.mode.searches_cleaned_strain

    @property
    def channels(self) -> int:
        """Channels streamed (``CampaignConfig.stream_channels``)."""
        return len(self.ifos) * (self.mode.strain + self.witnesses_per_ifo * self.mode.witnesses)

    @property
    def kernel_samples(self) -> int:
        return round(self.kernel_seconds * self.sample_rate_hz)

    @property
    def stride_samples(self) -> int:
        return round(self.sample_rate_hz / self.inference_rate_hz)

    @property
    def input_bytes_per_data_second(self) -> float:
        """The new samples one data second carries: ``channels x rate x 4`` bytes."""
        return self.channels * self.sample_rate_hz * SAMPLE_BYTES

    def window_seconds(self, windows: int) -> float:
        """Data seconds that ``windows`` consecutive windows advance the stream by."""
        return windows * self.stride_samples / self.sample_rate_hz


TOY = Workload("toy", "classifier", IFOS, 0, 2048.0, 4.0, 4.0, 32, streamed=True)
DEEPCLEAN = Workload("deepclean", "deepclean", ("H1",), 21, 2048.0, 1.0, 32.0, 32,
                     streamed=True)
O3_DEEPCLEAN = Workload("o3-deepclean", "deepclean", ("H1",), 21, 4096.0, 1.0, 32.0, 32,
                        streamed=True)
BBHNET = Workload("bbhnet", "bbhnet", IFOS, 0, 2048.0, 1.5, 4.0, 128, streamed=True)
AFRAME = Workload("aframe", "bbhnet", IFOS, 0, 2048.0, 1.5, 16.0, 128, streamed=True)
E2E = Workload("e2e", "e2e", IFOS, 21, 2048.0, 1.0, 32.0, 32, streamed=True)
E2E_INJECT = Workload("e2e-inject", "e2e", IFOS, 21, 2048.0, 1.0, 32.0, 32, inject=True,
                      streamed=True)
TINY = Workload("tiny", "classifier", IFOS, 0, 256.0, 1.0, 8.0, 32)
WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (TOY, DEEPCLEAN, O3_DEEPCLEAN, BBHNET, AFRAME, E2E, E2E_INJECT, TINY)
}
DEFAULT_WORKLOADS: tuple[str, ...] = ("toy", "deepclean", "o3-deepclean", "bbhnet", "aframe",
                                      "e2e")
"""What ``offline-iaas bench`` measures by default (``tiny`` is the regression check's;
``e2e-inject`` on demand: ``plan`` estimates it from ``e2e`` and ``bbhnet`` without it)."""
WORKLOAD_OF_MODE: dict[str, str] = {"classifier": "toy", "deepclean": "deepclean",
                                    "bbhnet": "bbhnet", "e2e": "e2e"}
WORKLOAD_OF_RAW_SEARCH = "e2e-inject"
"""The mode's workload of an e2e campaign that searches the raw strain too."""


def workload(name: str) -> Workload:
    """The workload called ``name``; ConfigError naming the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ConfigError(
            f"unknown bench workload {name!r} (known: {', '.join(WORKLOADS)})"
        ) from None


def workload_of(config: CampaignConfig) -> tuple[Workload, bool]:
    """The bench workload that streams and serves what ``config`` does, and whether it matches
    exactly (``same_stream`` and the same search on the raw strain); otherwise the mode's
    default workload (of the same graph: ``e2e-inject`` for an e2e campaign with
    ``search.inject``).
    """
    raw = config.outputs.searches_raw_strain
    for load in WORKLOADS.values():
        if same_stream(load, config) and load.searches_raw_strain == raw:
            return load, True
    return mode_workload(config.model.mode, config.outputs.searches_raw_strain), False


def same_stream(load: Workload, config: CampaignConfig) -> bool:
    """``load`` streams what ``config`` streams: mode, channels, sample rate, window, stride."""
    return (load.mode_name, load.channels, load.sample_rate_hz, load.kernel_samples,
            load.stride_samples) == (config.model.mode, len(config.stream_channels),
                                     config.data.sample_rate, config.kernel_samples,
                                     config.stride_samples)


def mode_workload(mode: str, searches_raw_strain: bool) -> Workload:
    """The default workload of ``mode`` (``model.mode``; ``e2e-inject`` for an e2e campaign
    that searches the raw strain too); ConfigError for a mode the bench has none of (a mode
    package's)."""
    if mode not in WORKLOAD_OF_MODE:
        raise ConfigError(f"model.mode {mode!r}: the bench has no workload of it (it measures "
                          f"the built-in modes: {', '.join(WORKLOAD_OF_MODE)}); size the "
                          "campaign from a pilot run of it instead: plan --from-run RUN")
    return workload(WORKLOAD_OF_RAW_SEARCH if searches_raw_strain else WORKLOAD_OF_MODE[mode])


def network_workload(network: str) -> Workload:
    """The default workload of the mode that serves ``network`` alone (``bbhnet``'s, whose
    network searches e2e's raw strain); ConfigError if no mode the bench measures does."""
    for mode, name in WORKLOAD_OF_MODE.items():
        if find_mode(mode).networks == (network,):
            return workload(name)
    raise ConfigError(f"the bench has no workload serving network {network!r} alone")


def without_raw_search(load: Workload) -> Workload:
    """The workload that streams what ``load`` streams without the search on the raw strain
    (``e2e`` for ``e2e-inject``; ``load`` itself if it has none)."""
    if not load.searches_raw_strain:
        return load
    return next(w for w in WORKLOADS.values() if not w.searches_raw_strain and (
        w.mode_name, w.ifos, w.witnesses_per_ifo, w.sample_rate_hz, w.kernel_seconds,
        w.inference_rate_hz) == (load.mode_name, load.ifos, load.witnesses_per_ifo,
                                 load.sample_rate_hz, load.kernel_seconds,
                                 load.inference_rate_hz))


def write_weights(load: Workload, directory: Path, seed: int = 0) -> Path | None:
    """Seeded initial weights of the workload's networks, as ``export --weights`` takes them
    (``deepclean-<IFO>.pt``, ``bbhnet.pt``: its whitening FIR as long as the trained one's,
    0.25 s, what a campaign's BBHnet runs); None for the classifier (seeded by export)."""
    if not load.mode.needs_weights:
        return None
    import torch

    from offline_iaas.mode_packages import network_kinds
    from offline_iaas.models.weights import build_network

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    expected = {"witnesses": load.witnesses_per_ifo, "ifos": len(load.ifos),
                "sample_rate_hz": load.sample_rate_hz}
    kinds = network_kinds()
    for network in load.mode.networks:
        if network not in kinds:
            continue  # a network without weights (the chain's subtraction)
        for name in kinds[network].weight_stems(load.ifos):
            net = build_network(network, expected)
            if hasattr(net, "input_scale"):  # BBHnet reads strain of STRAIN_SCALE
                net.input_scale.fill_(1 / STRAIN_SCALE)
            torch.save(net.state_dict(), directory / f"{name}.pt")
    return directory


def synthetic_samples(load: Workload, seconds: float, seed: int) -> np.ndarray:
    """Gaussian noise ``[channels, samples]`` (float32), a whole number of strides; the strain
    channels at ``STRAIN_SCALE``, the witnesses at 1.

    The content does not matter to throughput; the length does: ``seconds`` is rounded down
    to whole strides.
    """
    strides = int(seconds * load.sample_rate_hz) // load.stride_samples
    rng = np.random.default_rng(seed)
    samples = rng.standard_normal((load.channels, strides * load.stride_samples),
                                  dtype=np.float32)
    if load.mode.strain:
        samples[: len(load.ifos)] *= STRAIN_SCALE
    return samples


def split_strides(total_strides: int, parts: int) -> list[int]:
    """Strides of each of ``parts`` contiguous shares (differing by at most one)."""
    base, extra = divmod(total_strides, parts)
    return [base + (i < extra) for i in range(parts)]
