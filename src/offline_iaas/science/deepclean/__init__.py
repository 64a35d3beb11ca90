"""Mode ``deepclean``: noise regression from the witness channels, averaged online."""

from offline_iaas.mode_packages import ModePackage, ReportSection
from offline_iaas.modes import MODES
from offline_iaas.science.deepclean.graphs import deepclean_graphs
from offline_iaas.science.deepclean.products import clean_strain, cleaning_summary
from offline_iaas.science.deepclean.report import draw_cleaning
from offline_iaas.science.deepclean.stages import cleaning_stages
from offline_iaas.science.deepclean.summary import CLEANING_SECTIONS, cleaning_lines

CLEANING_SECTION = ReportSection("deepclean", "DeepClean", draw_cleaning)
"""DeepClean's section of the report (e2e's too)."""

PACKAGE = ModePackage(mode=MODES["deepclean"], graphs={"deepclean": deepclean_graphs},
                      stages=cleaning_stages, postprocess=clean_strain,
                      summarize=cleaning_summary, summary_sections=CLEANING_SECTIONS,
                      summary_lines=cleaning_lines, report_sections=(CLEANING_SECTION,))
"""What the entry point ``deepclean`` of ``offline_iaas.modes`` names."""
