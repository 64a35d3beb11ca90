"""What the foreground of injections on the fly (``search.inject``) adds to a campaign's work.

Each client streams the windows an injection reaches a second time, with the injections added
(``search/foreground.py``): per injection its found windows after the stretch's warm-up, nearby
ones merged (``stretches.foreground_windows``). ``plan`` counts them for the set's own times
in the campaign's span, and divides the rate a server streams data seconds at by
``1 + extra``: a foreground window costs what a background window costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from offline_iaas.config import CampaignConfig
from offline_iaas.search.foreground import injection_times
from offline_iaas.stretches import foreground_windows, whole_span


@dataclass(frozen=True)
class ForegroundWork:
    """The foreground's windows beside the background's analysed ones."""

    injections: int
    """Injections of the set in the campaign's span."""
    windows: int
    """Windows the foreground streams (warm-ups included)."""
    background_windows: int
    """The background's analysed (kept) windows."""

    @property
    def extra(self) -> float:
        """Foreground windows over the background's (0.1: 10 % more)."""
        return self.windows / self.background_windows if self.background_windows else 0.0

    def line(self) -> str:
        """``plan``'s line."""
        return (f"foreground: +{self.extra:.1%} windows for {self.injections} injections "
                f"(search.inject: {self.windows:,} windows streamed again, with their warm-up, "
                f"beside {self.background_windows:,}); the rate per data second is divided "
                f"by {1 + self.extra:.3f}")


def foreground_work(config: CampaignConfig) -> ForegroundWork | None:
    """The foreground's work over the config's span (None unless ``search.inject``)."""
    if not config.search.inject:
        return None
    stretches = whole_span(config)
    start, end = stretches[0].gps_start, stretches[-1].gps_end
    times = [t for t in injection_times(config.search) if start <= t < end]
    return ForegroundWork(len(times), foreground_windows(config.geometry, stretches, times,
                                                         config.search.found_seconds),
                          sum(s.kept_windows(config.geometry) for s in stretches))
