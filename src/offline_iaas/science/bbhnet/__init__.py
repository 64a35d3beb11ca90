"""Mode ``bbhnet``: the binary-black-hole search on the strain of every detector."""

from offline_iaas.mode_packages import ModePackage, ReportSection
from offline_iaas.modes import MODES
from offline_iaas.science.bbhnet.graphs import bbhnet_graphs
from offline_iaas.science.bbhnet.products import cluster_triggers, search_lines, search_summary
from offline_iaas.science.bbhnet.report import draw_search
from offline_iaas.science.bbhnet.stages import search_stages
from offline_iaas.science.bbhnet.summary import SEARCH_SECTIONS

SEARCH_SECTION = ReportSection("bbhnet", "BBHnet", draw_search)
"""The search's section of the report (e2e's too)."""

PACKAGE = ModePackage(mode=MODES["bbhnet"], graphs={"bbhnet": bbhnet_graphs},
                      stages=search_stages, postprocess=cluster_triggers,
                      summarize=search_summary, summary_sections=SEARCH_SECTIONS,
                      summary_lines=search_lines, report_sections=(SEARCH_SECTION,))
"""What the entry point ``bbhnet`` of ``offline_iaas.modes`` names."""
