"""Mode ``deepclean``: noise regression from the witness channels, averaged online."""

from offline_iaas.mode_packages import ModePackage
from offline_iaas.modes import MODES
from offline_iaas.science.deepclean.graphs import deepclean_graphs
from offline_iaas.science.deepclean.stages import cleaning_stages

PACKAGE = ModePackage(mode=MODES["deepclean"], graphs={"deepclean": deepclean_graphs},
                      stages=cleaning_stages)
"""What the entry point ``deepclean`` of ``offline_iaas.modes`` names."""
