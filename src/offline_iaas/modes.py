"""The campaign modes, one record each: what a mode streams, serves, averages and produces;
and the trained network kinds users bring weights for, one record each.

Code that behaves differently per mode asks the record (``CampaignConfig.mode``) instead of
comparing mode names. Each mode's record is its package's (``science/<mode>/__init__.py``,
``ModePackage.mode``), registered under the entry point group ``offline_iaas.modes``
(``mode_packages.py``); a mode from outside the project is a package registered under the
same group. Code that handles a network's weights asks its ``NetworkKind`` (declared by the
network's package, found by ``mode_packages.network_kind``), not its name. This module sits at
the package root beside ``config.py``, which needs it to derive the streamed channels and the
warm-up, and below everything else.

=============  ================  =================================  ===================
mode           streams           networks                           clients store
=============  ================  =================================  ===================
classifier     strain            classifier                         statistic
bbhnet         strain            bbhnet                             statistic
deepclean      witnesses         deepclean (+ online average)       noise
e2e            strain+witnesses  deepclean, subtract, bbhnet        noise, statistic
=============  ================  =================================  ===================

With injections on the fly (``search.inject``) e2e also searches the raw strain (the same
BBHnet on the strain before DeepClean's subtraction): ``statistic_raw`` (and ``background_raw``
with time slides), so a campaign measures cleaning's gain on the same injections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RAW = "_raw"
"""Suffix of the outputs of e2e's search on the raw strain (``statistic_raw``,
``background_raw``): the same search as the unsuffixed output's, on the strain before
DeepClean's subtraction."""


CANARY = "_canary"
"""Suffix of the outputs of a canary network (``noise_canary``): each per-sample output again,
from the same network exported with the canary's weights. (A name's suffix; DeepClean's
channels of the canary end in ``settings.CANARY_SUFFIX``, ``_CANARY``.)"""

PER_WINDOW_KINDS: tuple[str, ...] = ("statistic", "background")
"""Outputs of one value per window (``statistic``), or per window and slide (``background``);
every other output is per sample (``per_sample``)."""


def output_kind(name: str) -> str:
    """What an output holds, whichever strain it searched: ``statistic``, ``background``, or
    the output's own name (``noise``, ``noise_canary``)."""
    base = name.removesuffix(RAW)
    return base if base in PER_WINDOW_KINDS else name


def per_sample(name: str) -> bool:
    """Output ``name`` is one series per interferometer at the strain's sample rate
    (DeepClean's prediction), not one value per window: the core stores, merges and stitches
    it by sample time."""
    return output_kind(name) not in PER_WINDOW_KINDS


@dataclass(frozen=True)
class Mode:
    """What one campaign mode does.

    Parameters
    ----------
    name
        ``model.mode``.
    strain, witnesses
        The update streams the strain channels (``data.channels``), then the witnesses.
    networks
        The network graphs it serves, in chain order.
    outputs
        What clients request and store.
    snapshots
        Windowed snapshots in the chain (e2e windows the cleaned strain a second time).
    averages
        DeepClean's overlapping predictions are averaged online (a cleaned-strain product).
    triggers
        The statistic is BBHnet's: the merge clusters triggers and counts found injections.
    needs_weights
        ``export`` needs trained weights (the classifier is seeded).
    native_gpu
        The native gpu layout (``export --flavor gpu --ensemble``: onnxruntime-backend models,
        Triton implicit state) is written for it; the default gpu flavor serves every mode.
    streamable
        Its networks can be streamed layer by layer (``model.streamed``): the built-in modes'
        (where the config allows); a mode package's are served on whole windows.
    """

    name: str
    strain: bool
    witnesses: bool
    networks: tuple[str, ...]
    outputs: tuple[str, ...]
    snapshots: int = 1
    averages: bool = False
    triggers: bool = False
    needs_weights: bool = True
    native_gpu: bool = False
    streamable: bool = True

    @property
    def cleans_strain(self) -> bool:
        """Its product is cleaned strain: the merge reads the raw frames to subtract the
        averaged prediction from, and writes GWF files beside the campaign file."""
        return self.averages

    @property
    def searches_cleaned_strain(self) -> bool:
        """BBHnet searches the strain DeepClean cleaned (the e2e chain)."""
        return self.cleans_strain and self.triggers

    @property
    def statistic_network(self) -> str:
        """The network whose output is the statistic: the last of its chain (with
        ``triggers``, the one that makes them; the search leaves out the training spans of
        every network the mode serves: ``search/held_out.py``)."""
        return self.networks[-1]

    @property
    def warmup_stages(self) -> int:
        """Stages whose latency a stream must warm up: each snapshot, and the average."""
        return self.snapshots + int(self.averages)

    def output_names(self, *, canary: bool, has_slides: bool, inject: bool = False
                     ) -> tuple[str, ...]:
        """What its clients request and store: ``outputs``, then with a canary each
        per-sample output again (``noise_canary``) and ``background`` with time slides; then,
        where the cleaned strain is searched with injections on the fly (``inject``), the
        same search on the raw strain (``statistic_raw``, and ``background_raw`` with time
        slides)."""
        searched = ("statistic",) + (("background",) if has_slides else ())
        raw = (tuple(name + RAW for name in searched)
               if inject and self.searches_cleaned_strain else ())
        canaries = tuple(name + CANARY for name in self.outputs if per_sample(name))
        return (self.outputs + (canaries if canary else ())
                + (("background",) if has_slides else ()) + raw)


@dataclass(frozen=True)
class Outputs:
    """What a campaign's clients request and store (``CampaignConfig.outputs``), and one
    window's row of each.

    A response holds ``statistic [n]`` (one value per window), ``background [n slides]`` (one
    per window and slide) or ``noise [ifos, n S]`` (the averaged prediction of the strides the
    windows completed); clients, the reference and the merge store them a row per window.
    """

    names: tuple[str, ...]
    ifos: int
    stride_samples: int
    slides: int

    @property
    def statistics(self) -> tuple[str, ...]:
        """The statistics among them (the foreground table's columns): ``statistic``, and
        e2e's ``statistic_raw`` where the raw strain is searched too."""
        return tuple(name for name in self.names if output_kind(name) == "statistic")

    @property
    def sample_series(self) -> tuple[str, ...]:
        """The per-sample outputs among them (``noise``, ``noise_canary``): empty where every
        output is per window."""
        return tuple(name for name in self.names if per_sample(name))

    @property
    def searches(self) -> tuple[str, ...]:
        """The suffix of each search's outputs: ``""`` (the statistic), and ``_raw`` where e2e
        searches the raw strain too (``statistic_raw``, ``background_raw``)."""
        return tuple(s for s in ("", RAW) if f"statistic{s}" in self.names)

    @property
    def searches_raw_strain(self) -> bool:
        """e2e also searches the raw strain, so that the campaign measures cleaning's gain
        on the same injections (with injections on the fly)."""
        return RAW in self.searches

    def row_shape(self, name: str) -> tuple[int, ...]:
        """Shape of one row of output ``name`` (``()`` for the statistic)."""
        if output_kind(name) == "statistic":
            return ()
        if output_kind(name) == "background":
            return (self.slides,)
        return (self.ifos, self.stride_samples)

    def rows(self, name: str, values: np.ndarray) -> np.ndarray:
        """One response's ``values`` of output ``name`` as one row per window:
        ``statistic [n]`` as is, ``background [n slides]`` → ``[n, slides]``,
        ``noise [ifos, n S]`` → ``[n, ifos, S]``."""
        if output_kind(name) == "statistic":
            return values
        if output_kind(name) == "background":
            return values.reshape(-1, self.slides)
        ifos, samples = values.shape
        return values.reshape(ifos, samples // self.stride_samples,
                              self.stride_samples).swapaxes(0, 1)


BUILT_IN_MODES: tuple[str, ...] = ("classifier", "deepclean", "bbhnet", "e2e")
"""The modes of this project's own packages (``science/<mode>/``, each holding its ``Mode``),
in the order messages list them: their entry points are taken before another distribution's
of the same name (``mode_packages.mode_package``)."""


@dataclass(frozen=True)
class NetworkKind:
    """A network users bring trained weights for (``models/weights.py`` checks them by it),
    declared by the mode package whose network it is (``BuiltInParts.network_kinds``).

    Parameters
    ----------
    name
        The weight files' stem (``deepclean-<IFO>.*``, ``bbhnet.*``).
    title
        What messages call it (``DeepClean``).
    input_rows
        The ``expected`` key (``models/weights.py``) counting its input window's rows:
        ``witnesses`` (DeepClean reads a detector's witness channels) or ``ifos`` (BBHnet
        reads the strain of every detector).
    predicts_samples
        One output value per window sample (DeepClean's noise prediction); otherwise one per
        window (BBHnet's statistic).
    output_name
        Its graph's output tensor.
    fresh
        ``fresh(expected, whitening_taps)``: a newly initialised network of the campaign's
        shape (placeholder statistics), the architecture weight files are checked against.
    whitening_fir
        Its state_dict carries a whitening FIR (``whitening``, ``[ifos, 1, taps]``) whose
        length the weights choose.
    train_demo
        ``train_demo(config, frames, *, seed, threads, dataset, **overrides)``: the demo's
        networks of this kind trained on the campaign's synthetic dataset, by weight file
        stem (``deepclean-H1``), each with its ``training_report`` (``offline-iaas
        train-demo``, ``models/training.py``); None: the demo trains none.
    per_ifo
        One network per interferometer, weight files ``<name>-<IFO>.*`` (``weight_stems``);
        otherwise one network, ``<name>.*``.
    """

    name: str
    title: str
    input_rows: str
    predicts_samples: bool
    output_name: str
    fresh: Callable[[Mapping[str, Any], int | None], Any]
    whitening_fir: bool = False
    train_demo: Callable[..., Mapping[str, Any]] | None = None
    per_ifo: bool = False

    def weight_stem(self, ifo: str) -> str:
        """The stem of ``ifo``'s weight file (``deepclean-H1``; the kind's name where it has
        one network for all detectors)."""
        return f"{self.name}-{ifo}" if self.per_ifo else self.name

    def weight_stems(self, ifos: Sequence[str]) -> list[str]:
        """The weight files' stems of a campaign with ``ifos`` (``deepclean-H1``, ...)."""
        return [self.weight_stem(ifo) for ifo in ifos] if self.per_ifo else [self.name]
