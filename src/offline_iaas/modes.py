"""The campaign modes, one record each: what a mode streams, serves, averages and produces.

Code that behaves differently per mode asks the record (``CampaignConfig.mode``) instead of
comparing mode names, so a new mode is one more record here (and its stages in
``repository/pipeline.py``, its graphs in ``repository/networks.py``). This module sits at the
package root beside ``config.py``, which needs it to derive the streamed channels and the
warm-up, and below everything else.

=============  ================  =================================  ===================
mode           streams           networks                           clients store
=============  ================  =================================  ===================
classifier     strain            classifier                         statistic
bbhnet         strain            bbhnet                             statistic
deepclean      witnesses         deepclean (+ online average)       noise
e2e            strain+witnesses  deepclean, subtract, bbhnet        noise, statistic
=============  ================  =================================  ===================
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def warmup_stages(self) -> int:
        """Stages whose latency a stream must warm up: each snapshot, and the average."""
        return self.snapshots + int(self.averages)


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("classifier", strain=True, witnesses=False, networks=("classifier",),
             outputs=("statistic",), needs_weights=False, native_gpu=True),
        Mode("deepclean", strain=False, witnesses=True, networks=("deepclean",),
             outputs=("noise",), averages=True),
        Mode("bbhnet", strain=True, witnesses=False, networks=("bbhnet",),
             outputs=("statistic",), triggers=True, native_gpu=True),
        Mode("e2e", strain=True, witnesses=True, networks=("deepclean", "subtract", "bbhnet"),
             outputs=("noise", "statistic"), snapshots=2, averages=True, triggers=True),
    )
}
MODE_NAMES: tuple[str, ...] = tuple(MODES)
