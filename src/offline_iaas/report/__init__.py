"""The campaign report, ``RUN/report/index.html`` (``offline-iaas report RUN``)."""

from offline_iaas.report.build import write_report

__all__ = ["write_report"]
