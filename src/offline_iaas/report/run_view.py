"""The run directory as the report reads it (``ReportRun``): its config, records and physics,
read on demand, absent or unreadable ones None; what each section of the report, a mode
package's included (``ModePackage.report_sections``), draws from."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from offline_iaas import records
from offline_iaas.binding import JobSpecRead, config_edited
from offline_iaas.completeness import part_sidecar
from offline_iaas.config import CampaignConfig, config_from_text, read_config_text
from offline_iaas.data.gwf_reader import reader
from offline_iaas.data.hdf5_probe import every_object
from offline_iaas.errors import ConfigError, DataError, RunError
from offline_iaas.local_state import LocalState
from offline_iaas.records import PartRecord, RunInfo
from offline_iaas.report import page
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import CampaignSummary
from offline_iaas.summary_physics import Numbers, Physics, package_section, physics_type

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadFirst:
    """The files of a run that ``report``'s check of it read already, where it took the run
    (``workflow/status.checked_inputs``, status's), so that the page does not read them
    again."""

    config: CampaignConfig
    """``RUN/campaign.toml``."""
    info: RunInfo
    """``RUN/run.json``."""
    clients: Mapping[str, JobSpecRead]
    """The client job specs as the check read them (each spec or its problem; one absent:
    the page reads it)."""
    local: LocalState | None
    """run-local's ``local-state.json`` (None: run-local has not run)."""


class ReportRun:
    """The run directory's files, read on demand, each once (``read``: those read already);
    absent or unreadable ones are None."""

    def __init__(self, run: RunDir, read: ReadFirst | None = None,
                 config_text: str | ConfigError | None = None) -> None:
        self.paths = run
        self.read = read
        self.output, summary = self.paths.output
        self.config: CampaignConfig | None = read.config if read is not None else None
        self.config_error: str | None = None
        if config_text is None:
            try:
                config_text = read_config_text(self.paths.config)
            except ConfigError as err:
                config_text = err
        self.config_text: str | None = config_text if isinstance(config_text, str) else None
        """``RUN/campaign.toml``'s text, read once: shown on the page, and ``config`` parsed
        from it where the check did not parse it (None: unreadable, ``config_error``)."""
        if isinstance(config_text, ConfigError):
            self.config_error = str(config_text)
        elif read is None:
            try:
                self.config = config_from_text(config_text, self.paths.config)
            except Exception as err:  # a report is written whatever state the run is in
                self.config_error = str(err)
        self.problems: list[str] = []
        self.output_readable = self._readable_hdf5(self.output)
        # absent: None; damaged: None, and a problem shown on the page
        self.summary = records.read_or_none(CampaignSummary, summary, self.problems)
        self.run_info = (read.info if read is not None
                         else records.read_or_none(RunInfo, self.paths.run_info, self.problems))
        self._sidecars: dict[str, PartRecord | RunError | None] = {}
        self.config_edited: str | None = (
            config_edited(run, self.config, self.run_info)
            if self.config is not None and self.run_info is not None else None)
        """``binding.config_edited``'s line: campaign.toml edited since make-dag."""
        self.physics: Physics = (self.summary.physics if self.summary is not None
                                 else physics_type(self.mode)())
        """The merge's physics sections (``postprocess.summarize``'s; the mode's sections,
        all None, before the merge)."""

    def sidecar(self, node: str) -> PartRecord | RunError | None:
        """Client ``node``'s part sidecar, read once (``completeness.part_sidecar``)."""
        if node not in self._sidecars:
            self._sidecars[node] = part_sidecar(self.paths, node)
        return self._sidecars[node]

    def _readable_hdf5(self, path: Path) -> bool:
        """Whether ``path`` opens as HDF5 and every object and attribute in it can be read
        (``every_object``, in the frame reader's process: a byte flipped where the HDF5
        library crashes or loops is a problem too); one that cannot is a problem naming it."""
        if not path.is_file():
            return False
        try:
            reader().call(every_object, path)
        except DataError as err:
            problem = f"{err}; run the merge again"
            logger.warning(f"report: {problem}")
            self.problems.append(problem)
            return False
        return True

    @property
    def mode(self) -> str:
        return self.config.model.mode if self.config is not None else "unknown"

    @property
    def has_output(self) -> bool:
        """The merge's output is there and opens."""
        return self.output_readable

    @property
    def package_section(self) -> Numbers | None:
        """The section of the campaign summary the mode's package wrote (``ModePackage
        .summarize``), as its ``summary`` type; None where there is none (yet)."""
        if self.config is None:
            return None
        return package_section(self.physics, self.mode)


def absent(what: str, run: ReportRun) -> str:
    """A paragraph saying ``what`` is not in this campaign."""
    return page.paragraph(f"{what}: not in this campaign (mode {run.mode}).", "absent")


def cell(value: object) -> object:
    """A table cell: blank where the campaign gives no value."""
    return "" if value is None else value
