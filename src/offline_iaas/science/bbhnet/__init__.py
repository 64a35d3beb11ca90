"""Mode ``bbhnet``: the binary-black-hole search on the strain of every detector."""

from offline_iaas.mode_packages import ModePackage
from offline_iaas.modes import MODES
from offline_iaas.science.bbhnet.graphs import bbhnet_graphs
from offline_iaas.science.bbhnet.stages import search_stages

PACKAGE = ModePackage(mode=MODES["bbhnet"], graphs={"bbhnet": bbhnet_graphs},
                      stages=search_stages)
"""What the entry point ``bbhnet`` of ``offline_iaas.modes`` names."""
