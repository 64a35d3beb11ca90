"""Mode ``deepclean``: noise regression from the witness channels, averaged online."""

from offline_iaas.mode_packages import ModePackage
from offline_iaas.modes import MODES
from offline_iaas.science.deepclean.graphs import deepclean_graphs

PACKAGE = ModePackage(mode=MODES["deepclean"], graphs={"deepclean": deepclean_graphs})
"""What the entry point ``deepclean`` of ``offline_iaas.modes`` names."""
