"""``offline-iaas report``: write ``RUN/report/index.html`` from what a run directory holds.

Each section is drawn only from inputs that exist: a campaign without DeepClean has no ASDs, a
run without monitor CSVs no throughput plot; a missing input gives one line saying so, and an
unreadable one a line naming the problem, never a failed report.
"""

from __future__ import annotations

import logging
from pathlib import Path

import h5py

from offline_iaas.atomic import write_text_atomic
from offline_iaas.binding import check_run_directory, client_job_or_problem
from offline_iaas.completeness import Hashes, NotDone, ReadAlready, merge_problem, part_problem
from offline_iaas.errors import ConfigError, ModelError, RunError
from offline_iaas.gps import gps_text
from offline_iaas.job_specs import ClientJob
from offline_iaas.local_state import LocalState, read_local_state
from offline_iaas.manifest import MANIFEST_FILE, read_manifest
from offline_iaas.mode_packages import ReportSection, mode_package
from offline_iaas.records import PartRecord
from offline_iaas.report import page, plots
from offline_iaas.report.provenance import manifest_rows, software_versions
from offline_iaas.report.run_view import ReadFirst, ReportRun
from offline_iaas.report.timeline import (
    coverage,
    monitor_rates,
    node_attempts,
)
from offline_iaas.rundir import MERGE_NODE, RunDir
from offline_iaas.serve.crashes import crash_lines
from offline_iaas.serve.monitor import read_monitor_csv

logger = logging.getLogger(__name__)

def _clients(run: ReportRun) -> tuple[str, ...]:
    if run.run_info is not None:
        return run.run_info.clients
    return tuple(sorted(p.stem for p in run.paths.jobs.glob("client*.json")))


def _client_jobs(run: ReportRun) -> dict[str, ClientJob | str]:
    """Each client's job spec, or what is wrong with it: the line status shows on the
    client's line (``binding.client_job_or_problem``; a spec the check read, not read again)."""
    geometry = run.config.geometry if run.config is not None else None
    read = run.read.clients if run.read is not None else {}
    return {node: client_job_or_problem(run.paths, geometry, node, read.get(node))
            for node in _clients(run)}


def _why(run: ReportRun, problem: NotDone) -> str:
    """Why a node is not done, naming the config's own error where none could check it."""
    if problem.unchecked and run.config_error:
        return f"not checked against the campaign: {run.config_error}"
    return str(problem)


def _campaign(run: ReportRun, section: page.Section) -> None:
    """The campaign section: what is not done, coverage, node timeline, servers."""
    jobs = _client_jobs(run)
    _completion(run, section, jobs)
    section.parts.append(page.heading("Coverage"))
    _coverage(run, section, jobs)
    section.parts.append(page.heading("Node timeline"))
    state = run.read.local if run.read is not None else read_local_state(run.paths)
    _node_timeline(section, state)
    section.parts.append(page.heading("Servers"))
    servers = list(run.run_info.servers) if run.run_info is not None else []
    _server_crashes_and_balance(run, section, servers, state)
    _server_throughput(run, section, servers)


def _completion(run: ReportRun, section: page.Section, jobs: dict[str, ClientJob | str]
                ) -> None:
    """The run's problems, the merge's verdict and record, the client parts not done and the
    client job specs (``jobs``) missing or damaged."""
    for problem in ([run.config_error] if run.config_error else []) + run.problems:
        section.parts.append(page.paragraph(problem, "problem"))
    hashes = Hashes.of(run.config) if run.config is not None else None
    read = ReadAlready(  # the sidecars and the merge's summary, each read once
        sidecars={node: run.sidecar(node) for node in _clients(run)},
        summaries={MERGE_NODE: run.summary} if run.summary is not None else {})
    if run.summary is not None:
        verdict = merge_problem(run.paths, hashes, read=read)
        summary = run.summary
        section.parts.append(page.table(["merge", "value"], [
            ["complete", "yes" if verdict is None else f"no: {_why(run, verdict)}"],
            ["wall_seconds", summary.wall_seconds], ["peak_rss_mb", summary.peak_rss_mb],
            ["sha256", summary.sha256]]))
    parts = [[node, _why(run, problem)] for node in _clients(run)
             if (problem := part_problem(run.paths, node, hashes, read=read)) is not None]
    if parts:
        section.parts.append(page.paragraph(f"{len(parts)} client part(s) not done:", "problem"))
        section.parts.append(page.table(["client", "why"], parts))
    unread = [[node, job] for node, job in jobs.items() if isinstance(job, str)]
    if unread:
        section.parts.append(page.paragraph(
            f"{len(unread)} client job spec(s) missing or damaged (status names each on the "
            "client's line; its node cannot run again by it):", "problem"))
        section.parts.append(page.table(["client", "job spec"], unread))


def _coverage(run: ReportRun, section: page.Section, jobs: dict[str, ClientJob | str]
              ) -> None:
    """The coverage map of the client shares (``jobs``: those whose spec reads) against the
    output's stretches, and the bad frame files left out as gaps."""
    shares = [job.share for job in jobs.values() if not isinstance(job, str)]
    if not shares:
        section.parts.append(page.paragraph("No client job specs (RUN/jobs/*.json).", "absent"))
        return
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
            [[b.path, gps_text(b.gps_start), gps_text(b.gps_end), b.error] for b in bad]))


def _node_timeline(section: page.Section, state: LocalState | None) -> None:
    """The nodes' attempts as a Gantt chart (run-local's ``state``)."""
    bars = node_attempts(state) if state is not None else []
    if not bars:
        section.parts.append(page.paragraph(
            "No node timeline (RUN/local-state.json is written by run-local only).", "absent"))
    else:
        section.parts.append(page.image(plots.gantt_figure(bars), "node timeline"))


def _server_crashes_and_balance(run: ReportRun, section: page.Section, servers: list[str],
                                state: LocalState | None) -> None:
    """The servers' crashes and restarts (run-local's ``state``), and how the clients ended
    spread over them."""
    crashes = crash_lines(run.paths, servers, state)
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


def _server_throughput(run: ReportRun, section: page.Section, servers: list[str]) -> None:
    """The servers' throughput from their monitor CSVs (``servers`` first, in order); one
    that cannot be read is named, the others drawn."""
    csvs = sorted(run.paths.monitor.glob("*.csv"),
                  key=lambda p: (servers.index(p.stem) if p.stem in servers else len(servers),
                                 p.stem))
    if not csvs:
        section.parts.append(page.paragraph(
            "No monitor CSVs (RUN/monitor/<server>.csv): no throughput or queue plots.",
            "absent"))
        return
    rates = {}
    for path in csvs:  # one that cannot be read is named, the others are drawn
        try:
            rates[path.stem] = {model: monitor_rates(cols)
                                for model, cols in read_monitor_csv(path).items()}
        except RunError as err:
            section.parts.append(page.paragraph(str(err), "problem"))
    if not rates:
        return
    section.parts.append(page.image(plots.monitor_figure(rates), "server throughput"))


def _server_balance(run: ReportRun, servers: list[str]) -> list[list[object]]:
    """Per server: the clients that ended on it, those that failed over to it, and how long
    before the campaign's last response its own last one came (the parts' sidecars)."""
    ended: dict[str, list[str]] = {s: [] for s in servers}
    moved: dict[str, list[str]] = {s: [] for s in servers}
    last: dict[str, float] = {}
    for node in _clients(run):
        sidecar = run.sidecar(node)
        if isinstance(sidecar, RunError):  # as records.read_or_none: a problem, no row
            run.problems.append(str(sidecar))
        if not isinstance(sidecar, PartRecord):
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


def _provenance(run: ReportRun, section: page.Section) -> None:
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
    manifest, unreadable = None, None
    if run.config is not None:
        try:
            manifest = read_manifest(run.config.model.repository)
        except ModelError as err:  # missing, or damaged: said so
            unreadable = str(err)
    if unreadable is not None and (run.config.model.repository / MANIFEST_FILE).exists():
        section.parts.append(page.paragraph(f"The model repository's manifest: {unreadable}",
                                            "problem"))
    elif manifest is None:
        section.parts.append(page.paragraph("No model repository manifest found.", "absent"))
    else:
        section.parts.append(page.table(["manifest", ""],
                                        manifest_rows(manifest.model_dump(mode="json"))))
    section.parts.append(page.heading("Configuration (RUN/campaign.toml)"))
    if run.config_text is not None:  # else unreadable: config_error says why
        section.parts.append(page.preformatted(run.config_text))
    if run.config_error:
        section.parts.append(page.paragraph(run.config_error, "problem"))


SECTIONS: tuple[ReportSection, ...] = (
    ReportSection("campaign", "Campaign", _campaign),
    ReportSection("provenance", "Provenance", _provenance),
)


def write_report(run: RunDir, read: ReadFirst | None = None,
                 config_text: str | ConfigError | None = None,
                 refusal: str | None = None) -> Path:
    """Write ``RUN/report/index.html`` and return its path.

    A section that cannot be drawn says why on the page and in a warning.

    Parameters
    ----------
    run
        A run directory written by ``make-dag`` (at any stage: sections whose inputs are not
        there yet say so).
    read
        The files the run's check read already (``workflow/status.report_command``), or None:
        the page reads every file it draws.
    config_text
        ``RUN/campaign.toml``'s text (``config.read_config_text``) or why it could not be read,
        as the check read it (None: the page reads it); with ``read``, its config's text.
    refusal
        ``status``'s line where its check refuses the run (``report_command``), shown atop
        the page: a refusal the sections cannot show (run.json missing) is named there too.

    Raises
    ------
    RunError
        ``run`` is no run directory (``binding.check_run_directory``): nothing is written.
    """
    paths = run.absolute()
    check_run_directory(paths)
    found = ReportRun(paths, read, config_text)
    sections = []
    package = mode_package(found.mode) if found.config is not None else None
    drawn = (*(package.report_sections if package is not None else ()), *SECTIONS)
    for drawer in drawn:
        section = page.Section(drawer.anchor, drawer.title)
        try:
            drawer.draw(found, section)
        except Exception as err:  # one broken input must not cost the other sections
            logger.warning(f"report: {drawer.title}: not drawn: {type(err).__name__}: {err}")
            section.parts.append(page.paragraph(f"Not drawn: {type(err).__name__}: {err}",
                                                "problem"))
        sections.append(section)
    subtitle = f"Run directory {paths.path}; mode {found.mode}"
    if found.config is not None:
        data = found.config.data
        subtitle += (f"; GPS {gps_text(data.start)} + {data.duration:g} s; "
                     f"{', '.join(data.channels)}")
    path = paths.report
    path.parent.mkdir(parents=True, exist_ok=True)
    warnings = [found.config_edited] if found.config_edited is not None else []
    if refusal is not None and refusal not in warnings:  # the edit is status's own line
        warnings.append(refusal)
    write_text_atomic(path, page.render("offline-iaas campaign report", subtitle, sections,
                                        warnings))
    return path
