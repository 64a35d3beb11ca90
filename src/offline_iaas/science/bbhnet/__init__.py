"""Mode ``bbhnet``: the binary-black-hole search on the strain of every detector."""

from offline_iaas.mode_packages import ModePackage, ReportSection, StreamedExport, deferred
from offline_iaas.modes import Mode
from offline_iaas.science.bbhnet.summary import SEARCH_SECTIONS

PRODUCTS = "offline_iaas.science.bbhnet.products"
SEARCH_SECTION = ReportSection("bbhnet", "BBHnet",
                               deferred("offline_iaas.science.bbhnet.report:draw_search"))
"""The search's section of the report (e2e's too)."""
BBHNET_GRAPHS = deferred("offline_iaas.science.bbhnet.graphs:bbhnet_graphs")
BBHNET_STREAMED = StreamedExport(
    "BBHnet", deferred("offline_iaas.science.bbhnet.streamed:export_campaign_network"))

MODE = Mode("bbhnet", strain=True, witnesses=False, networks=("bbhnet",),
            outputs=("statistic",), triggers=True, native_gpu=True)
"""Its record: the strain of every detector in, the statistic out, clustered into triggers."""

PACKAGE = ModePackage(
    mode=MODE, graphs={"bbhnet": BBHNET_GRAPHS},
    stages=deferred("offline_iaas.science.bbhnet.stages:search_stages"),
    postprocess=deferred(f"{PRODUCTS}:cluster_triggers"),
    summarize=deferred(f"{PRODUCTS}:search_summary"), summary_sections=SEARCH_SECTIONS,
    summary_lines=deferred(f"{PRODUCTS}:search_lines"), report_sections=(SEARCH_SECTION,),
    streamed={"bbhnet": BBHNET_STREAMED})
"""What the entry point ``bbhnet`` of ``offline_iaas.modes`` names (its functions imported
when first called: ``mode_packages.deferred``)."""
