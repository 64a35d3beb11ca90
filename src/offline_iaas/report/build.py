"""``offline-iaas report``: write ``RUN/report/index.html`` from what a run directory holds.

Each section is drawn only from inputs that exist: a campaign without DeepClean has no ASDs, a
run without monitor CSVs no throughput plot; a missing input gives one line saying so, and an
unreadable one a line naming the problem, never a failed report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import h5py

from offline_iaas import records
from offline_iaas.atomic import write_text_atomic
from offline_iaas.completeness import Hashes, merge_problem, part_problem
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.config_sections import DeepCleanConfig
from offline_iaas.errors import RunError
from offline_iaas.local_state import read_local_state
from offline_iaas.mode_packages import ModePackage, mode_package
from offline_iaas.physics import SECONDS_PER_YEAR
from offline_iaas.records import (
    CampaignSummary,
    ClientShare,
    PartRecord,
    R,
    RunInfo,
    read_client_job,
)
from offline_iaas.report import page, plots
from offline_iaas.report.provenance import (
    manifest_rows,
    read_repository_manifest,
    software_versions,
)
from offline_iaas.report.search import read_background, read_triggers, statistic_traces
from offline_iaas.report.spectra import (
    RANGE_FMIN_HZ,
    ifos_with_clean_strain,
    inspiral_range,
    strain_spectra,
)
from offline_iaas.report.timeline import (
    coverage,
    monitor_rates,
    node_attempts,
)
from offline_iaas.rundir import RunDir
from offline_iaas.sensitivity import population_caption, time_caption
from offline_iaas.serve.crashes import crash_lines
from offline_iaas.serve.monitor import read_monitor_csv
from offline_iaas.summary_physics import (
    Numbers,
    Physics,
    SearchNumbers,
    SensitivePoint,
    Sensitivity,
    package_section,
)

logger = logging.getLogger(__name__)

ASD_MAX_SECONDS = 2048.0
"""Data seconds per interferometer that the ASDs average (bounds time and memory)."""
LOUDEST_TRIGGERS = 200
"""Triggers read for the plot (the loudest); those above the threshold are marked."""


class _Run:
    """The run directory's files, read on demand; absent or unreadable ones are None."""

    def __init__(self, run: RunDir) -> None:
        self.paths = run
        self.output, summary = self.paths.output
        self.config: CampaignConfig | None = None
        self.config_error: str | None = None
        try:
            self.config = load_config(self.paths.config)
        except Exception as err:  # a report is written whatever state the run is in
            self.config_error = str(err)
        self.problems: list[str] = []
        self.summary = self._record(CampaignSummary, summary)
        self.run_info = self._record(RunInfo, self.paths.run_info)
        self.physics = self.summary.physics if self.summary is not None else Physics()
        """The merge's physics sections (``postprocess.summarize``'s)."""

    def _record(self, kind: type[R], path: Path) -> R | None:
        """A record, None when absent; a damaged one is a problem shown on the page."""
        try:
            return records.read_optional(kind, path)
        except RunError as err:
            self.problems.append(str(err))
            return None

    @property
    def mode(self) -> str:
        return self.config.model.mode if self.config is not None else "unknown"

    @property
    def has_output(self) -> bool:
        return self.output.is_file()


def _absent(what: str, run: _Run) -> str:
    return page.paragraph(f"{what}: not in this campaign (mode {run.mode}).", "absent")


def _deepclean(run: _Run, section: page.Section) -> None:
    ifos = ifos_with_clean_strain(run.output) if run.has_output else []
    if not ifos:
        section.parts.append(_absent("Cleaned strain", run))
        return
    settings = run.config.deepclean if run.config is not None else DeepCleanConfig()
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
        section.parts.append(page.image(plots.asd_figure(ifo, spectra, band), f"{ifo} ASD"))
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


def _search(run: _Run, section: page.Section) -> None:
    traces = statistic_traces(run.output) if run.has_output else []
    if not traces:
        section.parts.append(_absent("Statistic", run))
        return
    search = run.physics.bbhnet
    triggers = read_triggers(run.output, LOUDEST_TRIGGERS)
    threshold = None if search is None else (
        search.threshold if search.threshold is not None else
        _ifar_threshold_statistic(search, triggers))
    shown = triggers
    if triggers is not None and threshold is not None:
        shown = triggers[triggers["statistic"] >= threshold]
    injections = search.injections if search is not None else ()
    t0 = run.config.data.start if run.config is not None else float(traces[0].time[0])
    png = plots.statistic_figure(traces, shown, injections, threshold, t0)
    section.parts.append(page.image(png, "statistic against time"))
    if triggers is None:
        section.parts.append(_absent("Triggers", run))
    else:
        which = (f"at or above the threshold ({threshold:g})" if threshold is not None
                 else f"the {LOUDEST_TRIGGERS} loudest")
        section.parts.append(page.paragraph(f"Triggers marked: {which}."))
    if search is None:
        section.parts.append(_absent("Found/missed injections", run))
        return
    if search.slid:
        _false_alarms(run, section, search, threshold)
        return
    if search.sensitivity is not None:
        section.parts.append(page.paragraph(f"Sensitivity: {search.sensitivity.note}.",
                                            "absent"))
    section.parts.append(page.table(
        ["found", "missed", "threshold", "background [s]"],
        [[_cell(search.found), _cell(search.missed), _cell(search.threshold),
          _cell(search.background_seconds)]],
    ))
    if injections:
        section.parts.append(page.table(
            ["GPS time", "network SNR", "statistic", "found"],
            [[i.gps_time, i.network_snr, _cell(i.statistic), "yes" if i.found else "no"]
             for i in injections],
        ))


def _cell(value: object) -> object:
    """A table cell: blank where the campaign gives no value."""
    return "" if value is None else value


def _ifar_threshold_statistic(search: SearchNumbers, triggers) -> float | None:
    """The quietest trigger's statistic at or above the IFAR threshold (time slides)."""
    if search.ifar_threshold_years is None or triggers is None or "ifar" not in (
            triggers.dtype.names or ()):
        return None
    above = triggers["statistic"][triggers["ifar"] >= search.ifar_threshold_years]
    return float(above.min()) if len(above) else None


def _false_alarms(run: _Run, section: page.Section, search: SearchNumbers,
                  threshold: float | None) -> None:
    """The time slides' background: the cumulative-rate plot and found/missed at the IFAR
    threshold."""
    background = read_background(run.output)
    livetime = search.background_livetime_seconds or 0.0
    with h5py.File(run.output, "r") as f:
        zero_lag = f["triggers"]["statistic"].astype(float)
    analysed = search.analysed_seconds or 0.0  # the zero lag's: every trigger counts
    section.parts.append(page.heading("False-alarm rate"))
    section.parts.append(page.image(plots.cumulative_rate_figure(
        background if background is not None else zero_lag[:0], livetime, zero_lag, analysed,
        threshold), "cumulative rate of background and zero-lag triggers"))
    section.parts.append(page.paragraph(
        f"{search.time_shifts} time slides of {search.shift_seconds:g} s formed on the "
        f"server from the one stream, each where both detectors' windows lie in a stretch; "
        f"{search.background_triggers} background triggers in {livetime:.0f} s "
        f"({livetime / SECONDS_PER_YEAR:.3g} yr: the windows each slide formed, times the "
        "stride, less any time cut around injections or in the training span). A trigger's "
        "FAR is (n + 1) / livetime with n the background triggers at least as loud (PyCBC's "
        "convention): one louder than all gets 1 / livetime, the largest IFAR the background "
        "gives, and one with a single background trigger at least as loud half that."))
    if search.found is None or search.ifar_threshold_years is None:
        return
    section.parts.append(page.table(
        ["found (held out)", "missed (held out)", "IFAR threshold [yr]",
         "background livetime [s]"],
        [[search.found, search.missed, search.ifar_threshold_years, round(livetime)]]))
    _sensitivity(section, search)
    if search.injections:
        section.parts.append(page.table(
            ["GPS time", "network SNR", "chirp mass [Msun]", "distance [Mpc]", "statistic",
             "IFAR [yr]", "found", "held out"],
            [[i.gps_time, i.network_snr, _cell(i.chirp_mass), _cell(i.distance_mpc),
              _cell(i.statistic), f"{i.ifar_years or 0:.3g}", "yes" if i.found else "no",
              "no (training span)" if i.in_training else "yes"]
             for i in search.injections]))


def _cleaning_gain(section: page.Section, cleaned: Sensitivity, raw: Sensitivity | None
                   ) -> None:
    """e2e with injections on the fly: VT with and without cleaning at each named threshold
    (the same injections and slides; ``bbhnet.without_cleaning``) and their ratio, cleaning's
    gain."""
    if raw is None or raw.at_reach is None or cleaned.at_reach is None:
        return
    named = [("the background's reach", cleaned.at_reach, raw.at_reach),
             *((name, p, raw.at[name]) for name, p in cleaned.at.items() if name in raw.at)]
    rows = []
    for name, clean, plain in named:
        ratio = ""
        if clean.vt_gpc3_years is not None and plain.vt_gpc3_years:
            ratio = f"{clean.vt_gpc3_years / plain.vt_gpc3_years:.3g}"
        rows.append([f"{name} ({clean.ifar_threshold_years:.3g} yr; without cleaning "
                     f"{plain.ifar_threshold_years:.3g} yr)",
                     f"{clean.found}/{clean.injections}" if clean.measurable else "",
                     f"{plain.found}/{plain.injections}" if plain.measurable else "",
                     _vt_cell(clean), _vt_cell(plain), ratio])
    section.parts.append(page.heading("Cleaning's gain"))
    section.parts.append(page.paragraph(
        "The same BBHnet, injections and time slides on the strain before DeepClean's "
        "subtraction (statistic_raw, background_raw), each search's IFAR from its own "
        "background: VT with cleaning over VT without is cleaning's gain."))
    section.parts.append(page.table(
        ["IFAR threshold", "found (cleaned)", "found (raw)", "VT cleaned [Gpc^3 yr]",
         "VT raw [Gpc^3 yr]", "gain"], rows))


def _vt_cell(p: SensitivePoint) -> str:
    """VT [low, high] at one threshold, or why there is none (``sensitivity.py``)."""
    if not p.measurable or p.found_fraction_interval is None:
        return p.reason or ""
    if p.vt_gpc3_years is None or p.vt_interval_gpc3_years is None:
        low, high = p.found_fraction_interval
        return f"found fraction {p.found_fraction:.3g} [{low:.3g}, {high:.3g}]; no volume"
    low, high = p.vt_interval_gpc3_years
    return f"{p.vt_gpc3_years:.3g} [{low:.3g}, {high:.3g}]"


def _distance_cell(p: SensitivePoint) -> str:
    if p.sensitive_distance_mpc is None or p.sensitive_distance_interval_mpc is None:
        return ""
    low, high = p.sensitive_distance_interval_mpc
    return f"{p.sensitive_distance_mpc:.0f} [{low:.0f}, {high:.0f}]"


def _sensitivity(section: page.Section, search: SearchNumbers) -> None:
    """VT against the IFAR threshold with the population in the caption, its value at the
    named thresholds (or why not), and found/missed in chirp mass against distance
    (``sensitivity.sensitivity_summary``)."""
    found = search.sensitivity
    section.parts.append(page.heading("Sensitivity"))
    if found is None or found.at_reach is None or found.interval is None:
        note = found.note if found is not None and found.note else (
            "No sensitivity (no injection list).")
        section.parts.append(page.paragraph(note, "absent"))
        return
    counts, interval = found.counts, found.interval
    left_out = (f"{counts.in_training} injections in BBHnet's training span and "
                f"{counts.outside_analysed} outside the analysed span left out of "
                f"{counts.listed}; " if counts is not None else "")
    caption = (f"VT = V x T x found fraction over {found.injections} held-out injections "
               f"({left_out}{time_caption(found)}); "
               f"{interval.method} interval at {100 * interval.confidence:.2f} %. "
               f"Population: {population_caption(found.population)}.")
    section.parts.append(page.figure(plots.sensitivity_figure(
        found.curve, found.background_years or 0.0), "sensitive time-volume against IFAR",
        caption))
    named = [("the background's reach", found.at_reach), *found.at.items()]
    section.parts.append(page.table(
        ["IFAR threshold", "found", "VT [Gpc^3 yr] [interval]",
         "sensitive distance [Mpc] [interval]"],
        [[f"{name} ({p.ifar_threshold_years:.3g} yr)",
          f"{p.found}/{p.injections}" if p.measurable else "",
          _vt_cell(p), _distance_cell(p)] for name, p in named]))
    raw = search.without_cleaning
    _cleaning_gain(section, found, None if raw is None else raw.sensitivity)
    bound = search.volume_bound
    if bound is not None and bound.found_near_edge:
        section.parts.append(page.paragraph(
            f"{bound.found_near_edge} of {bound.near_edge} held-out injections beyond "
            f"{bound.distance_from_mpc:.0f} Mpc (the top 10 % of the drawn distances) were "
            "found: the drawn volume, not the search, bounds VT.", "problem"))
    near_cut = search.snr_cut_bound
    if near_cut is not None and near_cut.found_near_cut:
        section.parts.append(page.paragraph(
            f"{near_cut.found_near_cut} held-out injections were found with optimal network "
            f"SNR below {near_cut.snr_below:g}, close to the population's cut at "
            f"{near_cut.network_snr_min:g}: VT is understated.", "problem"))
    if found.notes:
        section.parts.append(page.paragraph(" ".join(f"{n}." for n in found.notes)))
    rows = [i for i in search.injections if i.chirp_mass is not None and not i.in_training]
    if rows and search.ifar_threshold_years is not None:
        section.parts.append(page.image(plots.found_missed_figure(
            rows, search.ifar_threshold_years), "found and missed injections"))


def _clients(run: _Run) -> tuple[str, ...]:
    if run.run_info is not None:
        return run.run_info.clients
    return tuple(sorted(p.stem for p in run.paths.jobs.glob("client*.json")))


def _shares(run: _Run) -> list[ClientShare]:
    return [read_client_job(run.paths, node) for node in _clients(run)
            if run.paths.job(node).exists()]


def _campaign(run: _Run, section: page.Section) -> None:
    for problem in run.problems:
        section.parts.append(page.paragraph(problem, "problem"))
    hashes = Hashes.of(run.config) if run.config is not None else None
    if run.summary is not None:
        verdict = merge_problem(run.paths, hashes)
        summary = run.summary
        section.parts.append(page.table(["merge", "value"], [
            ["complete", "yes" if verdict is None else f"no: {verdict}"],
            ["wall_seconds", summary.wall_seconds], ["peak_rss_mb", summary.peak_rss_mb],
            ["sha256", summary.sha256]]))
    parts = [[node, str(problem)] for node in _clients(run)
             if (problem := part_problem(run.paths, node, hashes)) is not None]
    if parts:
        section.parts.append(page.paragraph(f"{len(parts)} client part(s) not done:", "problem"))
        section.parts.append(page.table(["client", "why"], parts))
    section.parts.append(page.heading("Coverage"))
    shares = _shares(run)
    if not shares:
        section.parts.append(page.paragraph("No client job specs (RUN/jobs/*.json).", "absent"))
    else:
        stretches = None
        bad = list(run.summary.bad_frame_files) if run.summary is not None else []
        if run.has_output:
            with h5py.File(run.output, "r") as f:
                if "stretches" in f.attrs:
                    stretches = [(float(a), float(b)) for a, b in f.attrs["stretches"]]
        if run.config is not None:
            span = (run.config.data.start, run.config.data.start + run.config.data.duration)
        else:
            span = (min(p.gps_start for s in shares for p in s.pieces),
                    max(p.gps_end for s in shares for p in s.pieces))
        cov = coverage(span, shares, stretches, [b.span for b in bad])
        section.parts.append(page.image(plots.coverage_figure(cov), "coverage map"))
        lost = sum(b - a for a, b in cov.gaps)
        section.parts.append(page.paragraph(
            f"{len(cov.stretches)} analysable stretch(es), {lost:.1f} s of the "
            f"{span[1] - span[0]:.1f} s span in gaps; client shares are coloured by server "
            "(each bar is a piece streamed, warm-up included)."))
        if bad:
            section.parts.append(page.paragraph(
                f"{len(bad)} bad frame file(s) left out as gaps (data.on_bad_file = \"gap\"):",
                "problem"))
            section.parts.append(page.table(
                ["file", "GPS start", "GPS end", "why"],
                [[b.path, f"{b.gps_start:.0f}", f"{b.gps_end:.0f}", b.error] for b in bad]))

    section.parts.append(page.heading("Node timeline"))
    state = read_local_state(run.paths)
    bars = node_attempts(state) if state is not None else []
    if not bars:
        section.parts.append(page.paragraph(
            "No node timeline (RUN/local-state.json is written by run-local only).", "absent"))
    else:
        section.parts.append(page.image(plots.gantt_figure(bars), "node timeline"))

    section.parts.append(page.heading("Servers"))
    servers = list(run.run_info.servers) if run.run_info is not None else []
    crashes = crash_lines(run.paths, servers)
    if crashes:
        section.parts.append(page.paragraph(
            "Server processes died by a signal, or server nodes exited and were restarted "
            "(each stack trace is in the log named):", "problem"))
        section.parts.append(page.preformatted("\n".join(crashes)))
    balance = _server_balance(run, servers)
    if balance:
        section.parts.append(page.table(
            ["server", "clients ended on it", "failed over to it",
             "its last client done before the end [s]"], balance))
        section.parts.append(page.paragraph(
            "A server whose clients were all done long before the end sat idle while the "
            "others ran: more, shorter client shares balance the servers (or failover "
            "moved clients off a server that was lost)."))
    csvs = sorted(run.paths.monitor.glob("*.csv"),
                  key=lambda p: (servers.index(p.stem) if p.stem in servers else len(servers),
                                 p.stem))
    if not csvs:
        section.parts.append(page.paragraph(
            "No monitor CSVs (RUN/monitor/<server>.csv): no throughput or queue plots.",
            "absent"))
        return
    rates = {path.stem: {model: monitor_rates(cols)
                         for model, cols in read_monitor_csv(path).items()}
             for path in csvs}
    section.parts.append(page.image(plots.monitor_figure(rates), "server throughput"))


def _server_balance(run: _Run, servers: list[str]) -> list[list[object]]:
    """Per server: the clients that ended on it, those that failed over to it, and how long
    before the campaign's last response its own last one came (the parts' sidecars)."""
    ended: dict[str, list[str]] = {s: [] for s in servers}
    moved: dict[str, list[str]] = {s: [] for s in servers}
    last: dict[str, float] = {}
    for node in _clients(run):
        sidecar = run._record(PartRecord, run.paths.part(node)[1])
        if sidecar is None:
            continue
        server = (sidecar.servers or (sidecar.server,))[-1]
        ended.setdefault(server, []).append(node)
        moved.setdefault(server, [])
        if server != sidecar.server:
            moved[server].append(node)
        if sidecar.last_response_unix is not None:
            last[server] = max(last.get(server, 0.0), sidecar.last_response_unix)
    if not last:
        return []
    end = max(last.values())
    return [[server, len(nodes), ", ".join(moved[server]) or "-",
             round(end - last[server], 1) if server in last else "-"]
            for server, nodes in ended.items()]


def _provenance(run: _Run, section: page.Section) -> None:
    rows: list[list[object]] = [
        ["run id", run.run_info.run_id if run.run_info is not None else ""]]
    if run.config is not None:
        rows.append(["stream hash (the parts')", run.config.stream_hash()])
        rows.append(["merge hash (the merges')", run.config.merge_hash()])
        rows.append(["mode", run.config.model.mode])
    if run.summary is not None:
        rows.append(["merge hash of the output", run.summary.merge_hash])
    section.parts.append(page.table(["campaign", ""], rows))
    section.parts.append(page.heading("Software"))
    section.parts.append(page.table(["package", "version"], list(software_versions().items())))
    section.parts.append(page.heading("Models"))
    manifest = None
    if run.config is not None:
        manifest = read_repository_manifest(run.config.model.repository)
    if manifest is None:
        section.parts.append(page.paragraph("No model repository manifest found.", "absent"))
    else:
        section.parts.append(page.table(["manifest", ""],
                                        manifest_rows(manifest.model_dump(mode="json"))))
    section.parts.append(page.heading("Configuration (RUN/campaign.toml)"))
    try:
        section.parts.append(page.preformatted(run.paths.config.read_text()))
    except OSError as err:
        section.parts.append(page.paragraph(f"campaign.toml: {err}", "problem"))
    if run.config_error:
        section.parts.append(page.paragraph(run.config_error, "problem"))


def _package_drawer(package: ModePackage) -> Callable[[_Run, page.Section], None]:
    """Draws a mode package's section (``mode_packages.py``): the package draws it from the
    section of the campaign summary it wrote."""
    assert package.report is not None
    report = package.report

    def draw(run: _Run, section: page.Section) -> None:
        numbers = package_section(run.physics, run.mode)
        if numbers is None:
            section.parts.append(page.paragraph(
                f"{section.title}: no numbers yet (the merge writes them).", "absent"))
            return
        report(numbers, section)
    return draw


SECTIONS: tuple[tuple[str, str, Callable[[_Run, page.Section], None]], ...] = (
    ("deepclean", "DeepClean", _deepclean),
    ("bbhnet", "BBHnet", _search),
    ("campaign", "Campaign", _campaign),
    ("provenance", "Provenance", _provenance),
)


def write_report(run: RunDir) -> Path:
    """Write ``RUN/report/index.html`` and return its path.

    A section that cannot be drawn says why on the page and in a warning.

    Parameters
    ----------
    run
        A run directory written by ``make-dag`` (at any stage: sections whose inputs are not
        there yet say so).
    """
    paths = run.absolute()
    found = _Run(paths)
    sections = []
    package = mode_package(found.mode) if found.config is not None else None
    drawn = SECTIONS if package is None or package.report is None else (
        (found.mode, package.title or found.mode, _package_drawer(package)), *SECTIONS)
    for anchor, title, draw in drawn:
        section = page.Section(anchor, title)
        try:
            draw(found, section)
        except Exception as err:  # one broken input must not cost the other sections
            logger.warning(f"report: {title}: not drawn: {type(err).__name__}: {err}")
            section.parts.append(page.paragraph(f"Not drawn: {type(err).__name__}: {err}",
                                                "problem"))
        sections.append(section)
    subtitle = f"Run directory {paths.path}; mode {found.mode}"
    if found.config is not None:
        data = found.config.data
        subtitle += f"; GPS {data.start:.0f} + {data.duration:g} s; {', '.join(data.channels)}"
    path = paths.report
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, page.render("offline-iaas campaign report", subtitle, sections))
    return path
