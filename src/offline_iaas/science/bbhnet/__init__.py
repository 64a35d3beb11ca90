"""Mode ``bbhnet``: the binary-black-hole search on the strain of every detector."""

from offline_iaas.mode_packages import (
    BuiltInParts,
    ModePackage,
    ReportSection,
    StreamedExport,
    deferred,
)
from offline_iaas.modes import Mode, NetworkKind
from offline_iaas.science.bbhnet.summary import SEARCH_SECTIONS

PRODUCTS = "offline_iaas.science.bbhnet.products"
BBHNET_GRAPHS = deferred("offline_iaas.science.bbhnet.graphs:bbhnet_graphs")
SEARCH_SECTION = ReportSection("bbhnet", "BBHnet",
                               deferred("offline_iaas.science.bbhnet.report:draw_search"))
"""The search's section of the report (e2e's too)."""
BBHNET_STREAMED = StreamedExport(
    "BBHnet", deferred("offline_iaas.science.bbhnet.streamed:export_campaign_network"))
BBHNET_NETWORK = NetworkKind(
    "bbhnet", "BBHnet", "ifos", predicts_samples=False, output_name="statistic",
    fresh=deferred("offline_iaas.science.bbhnet.network:fresh_network"), whitening_fir=True,
    train_demo=deferred("offline_iaas.science.bbhnet.training:train_demo_network"))
"""The network users bring BBHnet weights for (``bbhnet.*``)."""

MODE = Mode("bbhnet", strain=True, witnesses=False, networks=("bbhnet",),
            outputs=("statistic",), triggers=True, native_gpu=True)
"""Its record: the strain of every detector in, the statistic out, clustered into triggers."""

PACKAGE = ModePackage(
    mode=MODE, graphs={"bbhnet": BBHNET_GRAPHS},
    summarize=deferred(f"{PRODUCTS}:search_summary"), report_sections=(SEARCH_SECTION,),
    built_in=BuiltInParts(
        stages=deferred("offline_iaas.science.bbhnet.stages:search_stages"),
        postprocess=deferred(f"{PRODUCTS}:triggers_and_background"),
        summary_sections=SEARCH_SECTIONS,
        summary_lines=deferred(f"{PRODUCTS}:search_lines"),
        streamed={"bbhnet": BBHNET_STREAMED}, network_kinds=(BBHNET_NETWORK,)))
"""What the entry point ``bbhnet`` of ``offline_iaas.modes`` names (its functions imported
when first called: ``mode_packages.deferred``)."""
