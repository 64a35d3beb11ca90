"""The injection list checked before any server starts (``serve/startup_checks.py``'s
``injections``): ``check_injections`` reads ``search.injections`` as the merge will
(``search/injection_list.py``) and says where its injections lie against the analysed span and
the training spans the search leaves out (``search/held_out.py``: every served network's;
BBHnet's, and in e2e DeepClean's too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.mode_packages import network_kinds
from offline_iaas.physics import (
    HELD_OUT,
    IN_TRAINING,
    OUTSIDE_ANALYSED,
    injection_counts,
    place_injections,
)
from offline_iaas.search.held_out import search_training_spans, training_spans_text
from offline_iaas.search.injection_list import read_campaign_injections
from offline_iaas.stretches import make_stretches, statistic_spans


@dataclass(frozen=True)
class InjectionCheck:
    """Where the injections of ``search.injections`` lie (``physics.place_injections``)."""

    path: Path
    counts: dict[str, int]
    training: dict[str, tuple[float, float]]
    """The training spans left out, by network (``search_training_spans``)."""
    described: bool
    """The list describes its population (VT possible; else found fractions only)."""
    network: str
    """The search network's weight stem (``bbhnet``)."""
    title: str
    """The search network as messages name it (its ``NetworkKind.title``: ``BBHnet``)."""

    def lines(self) -> list[str]:
        """What the check found, for the log."""
        c = self.counts
        training = training_spans_text(self.training, self.network, self.title)
        if not self.training:
            training += " (none recorded)"
        population = ("its population described" if self.described else
                      "no population described: found fractions, no VT")
        return [f"injection list {self.path}: {c['listed']} injections, {c[HELD_OUT]} held out "
                f"in the analysed span, {c[IN_TRAINING]} in {training}, "
                f"{c[OUTSIDE_ANALYSED]} outside the analysed span; {population}"]

    def warnings(self) -> list[str]:
        """Zero injections to count: the merge would have no found/missed and no VT."""
        if self.counts[HELD_OUT]:
            return []
        spans = training_spans_text(self.training, self.network, self.title, gps=False)
        return [f"search.injections: none of the {self.counts['listed']} injections of "
                f"{self.path} lies in the analysed span outside {spans}: "
                "the merge will count no found/missed injection and no VT"]


def check_injections(config: CampaignConfig, stretches: Sequence[tuple[float, float]],
                     training: Mapping[str, Sequence[float]]) -> InjectionCheck | None:
    """Read ``search.injections`` (exists, parses, has its columns) and place its injections
    against the analysed span of ``stretches`` (``preflight``'s) and the training spans the
    search leaves out (``search_training_spans`` of ``training``, the manifest's by network);
    None when the mode counts no injections or none are listed.

    Raises
    ------
    ConfigError, DataError
        One line naming ``search.injections``, the file and what is wrong
        (``search/injection_list.read_campaign_injections``; with ``search.inject`` also
        ``search/onthefly.on_the_fly``: the response set's waveforms and detectors).
    """
    if not config.mode.triggers or config.search.injections is None:
        return None
    listed = read_campaign_injections(config.search.injections)
    if config.search.inject:  # what the clients add: an InterferometerResponseSet's waveforms
        from offline_iaas.search.onthefly import on_the_fly

        on_the_fly(config)
    analysed = statistic_spans(config.geometry, make_stretches(config.geometry, list(stretches)))
    left_out = search_training_spans(config.mode, config.ifos, training)
    places = place_injections([i.gps_time for i in listed.injections], analysed,
                              list(left_out.values()))
    network = config.mode.statistic_network  # the one whose statistic makes the triggers
    kind = network_kinds().get(network)
    return InjectionCheck(listed.path, injection_counts(places), left_out,
                          bool(listed.population and listed.population.get("time_volume_gpc3")),
                          network, kind.title if kind is not None else network)
