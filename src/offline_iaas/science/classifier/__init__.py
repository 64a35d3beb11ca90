"""Mode ``classifier``: a seeded BBHnet-shaped CNN on the strain (plumbing, benchmarks)."""

from offline_iaas.mode_packages import (
    BuiltInParts,
    ModePackage,
    ReportSection,
    StreamedExport,
    deferred,
)
from offline_iaas.modes import Mode

MODE = Mode("classifier", strain=True, witnesses=False, networks=("classifier",),
            outputs=("statistic",), needs_weights=False, native_gpu=True)
"""Its record: the strain in, one statistic per window out, seeded (no weights to bring)."""

PACKAGE = ModePackage(
    mode=MODE,
    graphs={"classifier": deferred("offline_iaas.science.classifier.graphs:classifier_graphs")},
    report_sections=(ReportSection(
        "statistic", "Statistic",
        deferred("offline_iaas.science.classifier.report:draw_statistic")),),
    built_in=BuiltInParts(streamed={"classifier": StreamedExport("the classifier", deferred(
        "offline_iaas.science.bbhnet.streamed:export_campaign_classifier"))}))
"""What the entry point ``classifier`` of ``offline_iaas.modes`` names (its functions
imported when first called: ``mode_packages.deferred``)."""
