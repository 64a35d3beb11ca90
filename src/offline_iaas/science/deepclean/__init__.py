"""Mode ``deepclean``: noise regression from the witness channels, averaged online."""

from offline_iaas.mode_packages import (
    BuiltInParts,
    ModePackage,
    ReportSection,
    StreamedExport,
    deferred,
)
from offline_iaas.modes import Mode, NetworkKind
from offline_iaas.science.deepclean.settings import (
    CANARY_NETWORK,
    MERGE_ONLY,
    SERIES_PRODUCTS,
    DeepCleanConfig,
    check_deepclean,
    frame_file_seconds,
    series_channel,
)
from offline_iaas.science.deepclean.summary import CLEANING_SECTIONS, cleaning_lines

PRODUCTS = "offline_iaas.science.deepclean.products"
CLEANING_SECTION = ReportSection("deepclean", "DeepClean",
                                 deferred("offline_iaas.science.deepclean.report:draw_cleaning"))
"""DeepClean's section of the report (e2e's too)."""
DEEPCLEAN_GRAPHS = deferred("offline_iaas.science.deepclean.graphs:deepclean_graphs")
_STREAMED = "offline_iaas.science.deepclean.streamed"
_RUNNER = "offline_iaas.science.deepclean.backend.streamed_deepclean"
DEEPCLEAN_STREAMED = {
    "deepclean": StreamedExport("DeepClean", deferred(f"{_STREAMED}:export_campaign_deepclean"),
                                runner=_RUNNER),
    CANARY_NETWORK: StreamedExport("DeepClean", deferred(f"{_STREAMED}:export_campaign_canary"),
                                   canary=True, runner=_RUNNER)}
"""DeepClean's networks streamed layer by layer: its own, and the canary's weights', run by
its own runner (``backend/streamed_deepclean.py``)."""
DEEPCLEAN_NETWORK = NetworkKind(
    "deepclean", "DeepClean", "witnesses", predicts_samples=True, output_name="prediction",
    fresh=deferred("offline_iaas.science.deepclean.network:fresh_network"),
    train_demo=deferred("offline_iaas.science.deepclean.training:train_demo_networks"),
    per_ifo=True)
"""The network users bring DeepClean weights for, one per interferometer
(``deepclean-<IFO>.*``)."""

DEEPCLEAN_SETTINGS = {
    "config_section": DeepCleanConfig, "config_section_name": "deepclean",
    "merge_only": MERGE_ONLY, "check_config": check_deepclean}
"""DeepClean's ``[deepclean]`` section and its rules, in ``ModePackage``'s terms (e2e's too)."""
DEEPCLEAN_FILES = {"file_seconds": frame_file_seconds, "series_channel": series_channel,
                   "series_products": SERIES_PRODUCTS}
"""Its GWF files' length, its series' channel names and its cleaned strain's groups, in
``BuiltInParts``' terms (e2e's too)."""

MODE = Mode("deepclean", strain=False, witnesses=True, networks=("deepclean",),
            outputs=("noise",), averages=True)
"""Its record: the witnesses in, the averaged noise prediction out."""

PACKAGE = ModePackage(
    mode=MODE, graphs={"deepclean": DEEPCLEAN_GRAPHS},
    summarize=deferred(f"{PRODUCTS}:cleaning_summary"), report_sections=(CLEANING_SECTION,),
    **DEEPCLEAN_SETTINGS, built_in=BuiltInParts(
        stages=deferred("offline_iaas.science.deepclean.stages:cleaning_stages"),
        postprocess=deferred(f"{PRODUCTS}:clean_strain"), summary_sections=CLEANING_SECTIONS,
        summary_lines=cleaning_lines, streamed=DEEPCLEAN_STREAMED,
        network_kinds=(DEEPCLEAN_NETWORK,), **DEEPCLEAN_FILES))
"""What the entry point ``deepclean`` of ``offline_iaas.modes`` names (its functions
imported when first called: ``mode_packages.deferred``)."""
