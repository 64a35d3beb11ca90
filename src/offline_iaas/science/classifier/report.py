"""The classifier's section of the report (``ModePackage.report_sections``): its statistic
against time."""

from __future__ import annotations

from offline_iaas.report import page, plots
from offline_iaas.report.run_view import ReportRun, absent
from offline_iaas.report.search import statistic_traces


def draw_statistic(run: ReportRun, section: page.Section) -> None:
    """The statistic of every stretch against time."""
    traces = statistic_traces(run.output) if run.has_output else []
    if not traces:
        section.parts.append(absent("Statistic", run))
        return
    t0 = run.config.data.start if run.config is not None else float(traces[0].time[0])
    png = plots.statistic_figure(traces, None, (), None, t0)
    section.parts.append(page.image(png, "statistic against time"))
