"""offline-iaas: offline reprocessing of gravitational-wave data with models served by Triton."""

__version__ = "0.1.0"
