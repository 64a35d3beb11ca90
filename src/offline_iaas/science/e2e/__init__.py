"""Mode ``e2e``: DeepClean's averaged prediction subtracted from the strain, and BBHnet on the
cleaned strain (and, with injections on the fly, on the raw strain too)."""

from offline_iaas.mode_packages import ModePackage
from offline_iaas.modes import MODES
from offline_iaas.science.bbhnet import SEARCH_SECTION
from offline_iaas.science.bbhnet.graphs import bbhnet_graphs
from offline_iaas.science.bbhnet.summary import SEARCH_SECTIONS
from offline_iaas.science.deepclean import CLEANING_SECTION
from offline_iaas.science.deepclean.graphs import deepclean_graphs
from offline_iaas.science.deepclean.summary import CLEANING_SECTIONS
from offline_iaas.science.e2e.graphs import subtract_graphs
from offline_iaas.science.e2e.products import chain_lines, chain_postprocess, chain_summary
from offline_iaas.science.e2e.stages import chain_stages

PACKAGE = ModePackage(mode=MODES["e2e"], graphs={
    "deepclean": deepclean_graphs, "subtract": subtract_graphs, "bbhnet": bbhnet_graphs},
    stages=chain_stages, postprocess=chain_postprocess, summarize=chain_summary,
    summary_sections={**CLEANING_SECTIONS, **SEARCH_SECTIONS}, summary_lines=chain_lines,
    report_sections=(CLEANING_SECTION, SEARCH_SECTION))
"""What the entry point ``e2e`` of ``offline_iaas.modes`` names."""
