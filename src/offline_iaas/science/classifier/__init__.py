"""Mode ``classifier``: a seeded BBHnet-shaped CNN on the strain (plumbing, benchmarks)."""

from offline_iaas.mode_packages import ModePackage, ReportSection
from offline_iaas.modes import MODES
from offline_iaas.science.classifier.graphs import classifier_graphs
from offline_iaas.science.classifier.report import draw_statistic

PACKAGE = ModePackage(
    mode=MODES["classifier"], graphs={"classifier": classifier_graphs},
    report_sections=(ReportSection("statistic", "Statistic", draw_statistic),))
"""What the entry point ``classifier`` of ``offline_iaas.modes`` names."""
