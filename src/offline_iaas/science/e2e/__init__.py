"""Mode ``e2e``: DeepClean's averaged prediction subtracted from the strain, and BBHnet on the
cleaned strain (and, with injections on the fly, on the raw strain too)."""

from offline_iaas.mode_packages import BuiltInParts, ModePackage, deferred
from offline_iaas.modes import Mode
from offline_iaas.science.bbhnet import (
    BBHNET_GRAPHS,
    BBHNET_NETWORK,
    BBHNET_STREAMED,
    SEARCH_SECTION,
)
from offline_iaas.science.bbhnet.summary import SEARCH_SECTIONS
from offline_iaas.science.deepclean import (
    CLEANING_SECTION,
    DEEPCLEAN_FILES,
    DEEPCLEAN_GRAPHS,
    DEEPCLEAN_NETWORK,
    DEEPCLEAN_SETTINGS,
    DEEPCLEAN_STREAMED,
)
from offline_iaas.science.deepclean.summary import CLEANING_SECTIONS

PRODUCTS = "offline_iaas.science.e2e.products"

MODE = Mode("e2e", strain=True, witnesses=True, networks=("deepclean", "subtract", "bbhnet"),
            outputs=("noise", "statistic"), snapshots=2, averages=True, triggers=True)
"""Its record: strain and witnesses in; DeepClean's prediction subtracted, the cleaned strain
windowed again (a second snapshot) for BBHnet."""

PACKAGE = ModePackage(
    mode=MODE, graphs={
        "deepclean": DEEPCLEAN_GRAPHS,
        "subtract": deferred("offline_iaas.science.e2e.graphs:subtract_graphs"),
        "bbhnet": BBHNET_GRAPHS},
    summarize=deferred(f"{PRODUCTS}:chain_summary"),
    report_sections=(CLEANING_SECTION, SEARCH_SECTION), **DEEPCLEAN_SETTINGS,
    built_in=BuiltInParts(
        stages=deferred("offline_iaas.science.e2e.stages:chain_stages"),
        postprocess=deferred(f"{PRODUCTS}:chain_postprocess"),
        summary_sections={**CLEANING_SECTIONS, **SEARCH_SECTIONS},
        summary_lines=deferred(f"{PRODUCTS}:chain_lines"),
        streamed={**DEEPCLEAN_STREAMED, "bbhnet": BBHNET_STREAMED},
        network_kinds=(DEEPCLEAN_NETWORK, BBHNET_NETWORK), **DEEPCLEAN_FILES))
"""What the entry point ``e2e`` of ``offline_iaas.modes`` names (its functions imported when
first called: ``mode_packages.deferred``)."""
