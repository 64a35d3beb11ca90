"""Which training spans the search's held-out time leaves out: the one choice that the merge's
background cuts and livetime, found/missed, VT's ``T`` and the pre-flight injection check share.

A network is over-fit on the data it was trained on, and whatever it outputs there is fed to
the search: BBHnet's statistic directly, DeepClean's cleaned strain (mode e2e) through BBHnet.
So the search leaves out the training span of every network its mode serves (the manifest's
and run.json's ``training``, network weight stem → GPS ``[start, end)``): in mode bbhnet
BBHnet's; in e2e DeepClean's per interferometer (``deepclean-H1`` ...) and BBHnet's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from offline_iaas.gps import gps_span_text
from offline_iaas.mode_packages import network_kinds
from offline_iaas.modes import Mode


def served_weight_stems(mode: Mode, ifos: Sequence[str]) -> list[str]:
    """The weight stems of every network ``mode`` serves for detectors ``ifos``, in chain
    order (``deepclean-H1``, ``deepclean-L1``, ``bbhnet`` in e2e); a network of no known
    kind under its own name."""
    kinds = network_kinds()
    stems: list[str] = []
    for name in mode.networks:
        kind = kinds.get(name)
        stems += kind.weight_stems(ifos) if kind is not None else [name]
    return stems


def search_training_spans(mode: Mode, ifos: Sequence[str],
                          training: Mapping[str, Sequence[float]]
                          ) -> dict[str, tuple[float, float]]:
    """The training spans (GPS ``[start, end)`` s) the search leaves out of its held-out time,
    by network weight stem: those ``training`` records of the networks ``mode`` serves
    (``served_weight_stems``; ``CampaignConfig.mode``, ``ifos``), in chain order. A span of a
    network not served (a weights directory trained for another mode) is not left out."""
    return {stem: (float(training[stem][0]), float(training[stem][1]))
            for stem in served_weight_stems(mode, ifos) if training.get(stem)}


def training_spans_text(spans: Mapping[str, Sequence[float]], network: str, title: str,
                        gps: bool = True) -> str:
    """How a message names the left-out ``spans`` (``search_training_spans``): ``BBHnet's
    training span (GPS a-b)`` where only the search ``network``'s is (or none is: no GPS),
    else ``the training spans of deepclean-H1 (GPS a-b) and bbhnet (GPS c-d)``; without
    ``gps`` the names only."""
    if set(spans) <= {network}:
        span = spans.get(network)
        at = f" (GPS {gps_span_text(span[0], span[1])})" if span and gps else ""
        return f"{title}'s training span{at}"
    named = [f"{name} (GPS {gps_span_text(a, b)})" if gps else name
             for name, (a, b) in spans.items()]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return f"the training span{'s' if len(named) > 1 else ''} of {listed}"
