"""DeepClean's section of the report (``ModePackage.report_sections``)."""

from __future__ import annotations

from offline_iaas.physics import ASD_MAX_SECONDS
from offline_iaas.report import page
from offline_iaas.report.run_view import ReportRun, absent
from offline_iaas.report.spectra import RANGE_FMIN_HZ, inspiral_range
from offline_iaas.science.deepclean import figures
from offline_iaas.science.deepclean.products import ifos_with_clean_strain, strain_spectra
from offline_iaas.science.deepclean.settings import DeepCleanConfig, deepclean_settings
from offline_iaas.summary_physics import Numbers


def draw_cleaning(run: ReportRun, section: page.Section) -> None:
    """DeepClean's section: per interferometer, the ASDs of the raw and cleaned strain, the
    BNS ranges and the merge's numbers (the canary's and the gate's beside them)."""
    ifos = ifos_with_clean_strain(run.output) if run.has_output else []
    if not ifos:
        section.parts.append(absent("Cleaned strain", run))
        return
    settings = deepclean_settings(run.config) if run.config is not None else DeepCleanConfig()
    band = (settings.band_low_hz, settings.band_high_hz)
    metrics = run.physics.deepclean or {}
    canaries = run.physics.deepclean_canary or {}
    gates = run.physics.deepclean_gate or {}
    for ifo in ifos:
        section.parts.append(page.heading(ifo))
        numbers = metrics.get(ifo)  # an interferometer with too little held-out data has none
        spectra = strain_spectra(run.output, ifo, settings.asd_fftlength, ASD_MAX_SECONDS,
                                 numbers.held_out_gps if numbers is not None else None)
        if spectra is None:
            section.parts.append(page.paragraph(
                f"{ifo}: no stretch is as long as the FFT length ({settings.asd_fftlength:g} s)",
                "absent"))
            continue
        section.parts.append(page.image(figures.asd_figure(ifo, spectra, band), f"{ifo} ASD"))
        canary = _values(canaries.get(ifo))
        blank = [""] if canary is not None else []
        rows: list[list[object]] = []
        clean_range = inspiral_range(spectra.frequencies, spectra.clean)
        if spectra.raw is not None:
            raw_range = inspiral_range(spectra.frequencies, spectra.raw)
            rows.append(["BNS range, raw [Mpc]", round(raw_range, 2), *blank])
        rows.append(["BNS range, cleaned [Mpc]", round(clean_range, 2), *blank])
        if spectra.raw is not None and raw_range > 0:
            rows.append(["range change [%]", round(100 * (clean_range / raw_range - 1), 2),
                         *blank])
        for key, value in (_values(numbers) or {}).items():
            rows.append([key, value] + ([canary[key]] if canary is not None else []))
        for key, value in (_values(gates.get(ifo)) or {}).items():
            rows.append([f"gate: {key}", value, *blank])
        header = ["quantity", "production", "canary"] if canary is not None else [
            "quantity", "value"]
        section.parts.append(page.table(header, rows))
    section.parts.append(page.paragraph(
        f"Range: 1.4+1.4 M☉ inspiral, SNR 8, angle-averaged (gwpy sensemon_range), from "
        f"{RANGE_FMIN_HZ:g} Hz; ASDs from at most {ASD_MAX_SECONDS:g} s per interferometer, "
        "over the held-out data the merge's numbers use (after the network's training data, "
        "when the weights record it); raw strain = cleaned + the subtracted noise."))


def _values(numbers: Numbers | None) -> dict[str, object] | None:
    """A section's fields as the table shows them (GPS spans as lists)."""
    return None if numbers is None else numbers.model_dump(mode="json")


