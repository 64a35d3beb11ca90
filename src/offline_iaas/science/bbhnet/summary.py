"""The search's section of the campaign summary (``campaign.json``'s ``bbhnet``), as types:
its triggers, background, found/missed injections and VT against IFAR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ConfigDict

from offline_iaas.search.held_out import training_spans_text
from offline_iaas.summary_physics import Numbers

SEARCH_NETWORK = "bbhnet"
"""The search network's weight stem: the key of its training span (``training_gps``)."""

WITHOUT_CLEANING = "without_cleaning"
"""The key in ``campaign.json``'s ``bbhnet`` section of e2e's search on the raw strain
(``statistic_raw``, with ``search.inject``): a record like ``bbhnet`` itself (triggers,
background, found/missed, sensitivity) on the same injections and slides."""


class InjectionRow(Numbers):
    """One listed injection in the analysed time, found or missed (``physics.found_missed``)."""

    gps_time: float
    network_snr: float
    network_snr_design: float | None = None
    """Against the design PSD, where the list records it (synth's cut is on it)."""
    chirp_mass: float | None = None
    distance_mpc: float | None = None
    statistic: float | None
    """The loudest statistic near it (None in a summary written before NaN was kept)."""
    found: bool
    in_training: bool
    ifar_years: float | None = None
    """With time slides: the IFAR of the loudest trigger near it."""


class InjectionCounts(Numbers):
    """Where the listed injections lie (``physics.place_injections``)."""

    listed: int
    held_out: int
    in_training: int
    outside_analysed: int


class SensitivePoint(Numbers):
    """VT at one IFAR threshold (``sensitivity.sensitive_volume``); a value that cannot be
    given is None and ``reason`` says why."""

    ifar_threshold_years: float
    measurable: bool
    """The background's livetime reaches the threshold (True when no livetime was given)."""
    background_needed_years: float
    """Background livetime that can measure this IFAR (the threshold itself)."""
    injections: int
    """Held-out injections counted."""
    trials: float
    """... in draws of the population (``injections x drawn / injected``)."""
    found: int | None = None
    found_fraction: float | None = None
    found_fraction_interval: tuple[float, float] | None = None
    vt_gpc3_years: float | None = None
    vt_interval_gpc3_years: tuple[float, float] | None = None
    sensitive_distance_mpc: float | None = None
    sensitive_distance_interval_mpc: tuple[float, float] | None = None
    reason: str | None = None
    """Why a value is None (not measurable; no population volume)."""


class SlidesNeeded(Numbers):
    """About how many slides reach one IFAR threshold (``sensitivity.slides_needed``)."""

    ifar_threshold_years: float
    slide_seconds: float
    have_slides: int
    have_years: float
    most_slides: int
    most_years: float
    slides: int | None
    """None: no number of slides of these stretches reaches it."""


class Interval(Numbers):
    method: str
    confidence: float


class Population(Numbers):
    """The population an injection list was drawn from (``search/injection_list``'s record:
    ``population.POPULATION_KEYS``, ``listed`` and ``source``); what the list does not say is
    None. Numbers come from the list's own attributes, so an integer written as a float
    reads."""

    model_config = ConfigDict(strict=False, frozen=True, extra="forbid",
                              ser_json_inf_nan="constants")

    approximant: str | None = None
    f_lower_hz: float | None = None
    mass_min_msun: float | None = None
    mass_max_msun: float | None = None
    mass_distribution: str | None = None
    spin_max: float | None = None
    spin_distribution: str | None = None
    redshift_max: float | None = None
    redshift_distribution: str | None = None
    luminosity_distance_max_mpc: float | None = None
    orientation_distribution: str | None = None
    cosmology: str | None = None
    comoving_volume_gpc3: float | None = None
    time_volume_gpc3: float | None = None
    network_snr_min: float | None = None
    drawn: int | None = None
    injected: int | None = None
    seed: int | None = None
    listed: int | None = None
    """The list's rows."""
    source: str | None = None
    """The list's path."""


class Sensitivity(Numbers):
    """VT against the IFAR threshold (``sensitivity.sensitivity_summary``), or only ``note``
    where a campaign measures none (no background, no held-out injection)."""

    population: Population | None = None
    counts: InjectionCounts | None = None
    note: str | None = None
    """Why there is no VT curve."""
    injections: int | None = None
    trials: float | None = None
    held_out_years: float | None = None
    """VT's ``T`` (None in a summary written before ``T`` was held out)."""
    analysed_years: float | None = None
    background_years: float | None = None
    """The largest IFAR the background measures."""
    volume_gpc3: float | None = None
    interval: Interval | None = None
    slides_needed: dict[str, SlidesNeeded] = {}
    vt_null_reason: str | None = None
    curve: tuple[SensitivePoint, ...] = ()
    at: dict[str, SensitivePoint] = {}
    """At the named IFAR thresholds (``sensitivity.NAMED_IFARS_YEARS``)."""
    at_reach: SensitivePoint | None = None
    notes: tuple[str, ...] = ()


class VolumeBound(Numbers):
    """Found injections near the population's largest distance (``sensitivity.volume_bound``)."""

    rule: str
    distance_from_mpc: float
    near_edge: int
    found_near_edge: int
    redshift_max: float | None


class SnrCutBound(Numbers):
    """Found injections close above the population's SNR cut (``sensitivity.cut_bound``)."""

    rule: str
    network_snr_min: float
    snr_below: float
    found_near_cut: int
    quietest_found_snr: float | None


class SearchNumbers(Numbers):
    """One BBHnet search's numbers (``products.search_summary``): its triggers; with time
    slides its background; with an injection list found/missed and VT."""

    triggers: int
    cluster_seconds: float
    time_shifts: int | None = None
    shift_seconds: float | None = None
    analysed_seconds: float | None = None
    background_triggers: int | None = None
    background_livetime_seconds: float | None = None
    zero_lag_livetime_seconds: float | None = None
    """With time slides: the analysed time outside the background's cuts (``physics.
    slide_livetime`` of slide 0), the time of the zero-lag triggers outside them (the
    ``triggers`` table's ``outside_cuts``); None in a summary written before it."""
    loudest_ifar_years: float | None = None
    found: int | None = None
    missed: int | None = None
    threshold: float | None = None
    """Without time slides: the statistic threshold from injection-free data."""
    background_seconds: float | None = None
    ifar_threshold_years: float | None = None
    """With time slides: found means a trigger at least this IFAR."""
    injection_counts: InjectionCounts | None = None
    injections: tuple[InjectionRow, ...] = ()
    training_gps: tuple[float, float] | None = None
    """BBHnet's training span."""
    training_spans_gps: dict[str, tuple[float, float]] | None = None
    """Every training span left out of the held-out time, by network (``search/held_out``:
    in e2e DeepClean's per interferometer too); None in a summary written before it."""
    held_out_seconds: float | None = None
    volume_bound: VolumeBound | None = None
    snr_cut_bound: SnrCutBound | None = None
    sensitivity: Sensitivity | None = None
    without_cleaning: SearchNumbers | None = None
    """e2e with injections on the fly: the same search on the raw strain."""

    @property
    def left_out_spans(self) -> dict[str, tuple[float, float]]:
        """The training spans left out, by network (``training_spans_gps``; in a summary
        written before it BBHnet's ``training_gps``)."""
        if self.training_spans_gps is not None:
            return dict(self.training_spans_gps)
        return {SEARCH_NETWORK: self.training_gps} if self.training_gps else {}

    @property
    def slid(self) -> bool:
        """Time slides formed a background (FAR and IFAR)."""
        return self.time_shifts is not None


SEARCH_SECTIONS = {"bbhnet": SearchNumbers}
"""The section of ``campaign.json`` that the search writes (``BuiltInParts.summary_sections``)."""


def left_out_text(training: Mapping[str, Sequence[float]], gps: bool = True) -> str:
    """The training spans left out as messages name them: ``BBHnet's training span (GPS a-b)``,
    or in e2e with DeepClean's ``the training spans of deepclean-H1 (GPS a-b), ... and bbhnet
    (GPS c-d)`` (``search/held_out.training_spans_text``)."""
    return training_spans_text(training, SEARCH_NETWORK, "BBHnet", gps)
