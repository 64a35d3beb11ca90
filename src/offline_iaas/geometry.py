"""The streams' window arithmetic as one small record (``StreamGeometry``): what share
planning, the stretches' window numbering and the streamed graphs read of a campaign, so that
they take it instead of the whole config. ``CampaignConfig.geometry`` derives it (the
definitions stay on the config's properties: ``config.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamGeometry:
    """Windows of a campaign's streams, in samples at the model rate.

    Parameters
    ----------
    grid_gps_start
        GPS origin of the stride grid (``data.start``): stretches' bounds lie on it.
    sample_rate
        ``data.sample_rate`` (Hz).
    kernel_samples, stride_samples
        A window's length and the step between windows.
    stretch_warmup_windows
        Windows of a stretch before its first kept one.
    warmup_windows
        Rows a stream begun inside a stretch discards (the stretch's warm-up and the longest
        slide's history).
    slide_windows
        ``Δ`` of the time slides in windows.
    slides
        ``search.slides``: the time slides each window is paired in.
    averaging_delay_windows
        Rows between a window and the averaged stride it completes (0 without averaging).
    """

    grid_gps_start: float
    sample_rate: float
    kernel_samples: int
    stride_samples: int
    stretch_warmup_windows: int
    warmup_windows: int
    slide_windows: int
    slides: int
    averaging_delay_windows: int

    @property
    def stride_seconds(self) -> float:
        """Data seconds between consecutive windows (one stride)."""
        return self.stride_samples / self.sample_rate
