"""The time grid and share planning: stretches, windows and their GPS stamps, and the split
of the analysable stretches into client shares (pure logic, no I/O).

The analysable span is a list of **stretches**: contiguous data, their ends on the stride grid
``data.start + m * stride``. A gap ends a stream, so every stretch is processed as its own
stream, starting with a zero-filled state, in the reference and in the campaign alike.

Windows are numbered within their stretch. Window ``j`` covers the samples
``[(j + 1) * stride - kernel, (j + 1) * stride)`` from the stretch's start and is stamped with the
GPS time of its end. The first ``ceil(kernel / stride) - 1`` windows of a stream still hold part
of the zero-filled state (more in the chained modes: ``config.stretch_warmup_windows``), so a
stretch's output starts at window ``stretch_warmup_windows``: every output window lies wholly
inside the data.

With time slides (``N`` of ``Δ`` windows) slide ``k`` of window ``j`` pairs the first detector's
window ``j`` with the second's window ``j - kΔ``; it is **formed** only where both are kept
windows (``j - kΔ >= stretch_warmup_windows``, ``slides_formed``) and is NaN elsewhere. The zero
lag starts at the stretch's warm-up whatever ``N``; slide ``k`` ``kΔ`` windows later.

The kept windows of all stretches are split into ``servers * clients_per_server`` near-equal
shares. A client's share is one or more **pieces**, one per stretch it touches; a piece that owns
windows ``[output_start, output_stop)`` streams from window ``output_start - warmup_windows``
(the warm-up and the longest slide's history), clipped at the stretch's start, so its state is
filled with real data by the first window it keeps, every slid pair of its windows that exists
in the stretch is in its stream, and its output equals the uninterrupted stream's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError
from offline_iaas.geometry import StreamGeometry
from offline_iaas.records import ClientShare, Piece


@dataclass(frozen=True)
class Stretch:
    """Contiguous analysable data, both ends on the stride grid."""

    index: int
    gps_start: float
    gps_end: float

    def windows(self, geometry: StreamGeometry) -> int:
        """Windows of a stream over the whole stretch (warm-up included)."""
        samples = round((self.gps_end - self.gps_start) * geometry.sample_rate)
        return samples // geometry.stride_samples

    def kept_windows(self, geometry: StreamGeometry) -> int:
        return max(0, self.windows(geometry) - geometry.stretch_warmup_windows)


def server_name(index: int) -> str:
    return f"server{index}"


def client_name(index: int) -> str:
    return f"client{index}"


def statistic_row_gps(geometry: StreamGeometry, stretch_gps_start: float,
                      rows: int | np.ndarray) -> float | np.ndarray:
    """GPS time of the statistic in row(s) ``rows`` of a stream over a stretch (rows numbered
    as the stretch's windows): the end of the row's window less the averaging delay."""
    return stretch_gps_start + (
        np.asarray(rows) - geometry.averaging_delay_windows + 1) * geometry.stride_seconds


def output_x0(geometry: StreamGeometry, stretch: Stretch, output: str) -> float:
    """GPS of the first value of an output over a stretch.

    The statistic is stamped at the end of its window; the averaged prediction (``noise``)
    at the start of its sample. Both lag the row that carries them by the averaging delay.
    """
    if output == "statistic":
        return float(statistic_row_gps(geometry, stretch.gps_start,
                                       geometry.stretch_warmup_windows))
    first_row = geometry.stretch_warmup_windows - geometry.averaging_delay_windows
    return stretch.gps_start + first_row * geometry.stride_seconds


def first_formed_window(geometry: StreamGeometry, slide: int) -> int:
    """Kept-window index (0: a stretch's first kept window) of the first window where slide
    ``slide`` (``1 .. N``) is formed: the second detector's window ``slide * Δ`` earlier is
    then the stretch's first kept window."""
    return slide * geometry.slide_windows


def slides_formed(geometry: StreamGeometry, kept_offset: int, count: int) -> np.ndarray:
    """Which slides are formed at ``count`` kept windows of a stretch from kept window
    ``kept_offset``: ``[count, N]``, column ``k - 1`` true where both windows of slide ``k``
    are kept windows of the stretch. The ``slides`` output holds NaN where it is false."""
    slides = np.arange(1, geometry.slides + 1)
    kept = np.arange(kept_offset, kept_offset + count)[:, None]
    return kept >= np.array([first_formed_window(geometry, int(k)) for k in slides])[None, :]


def statistic_spans(geometry: StreamGeometry, stretches: Sequence[Stretch]
                    ) -> list[tuple[float, float]]:
    """Per stretch with windows, the GPS span its statistic covers: from one stride before the
    statistic's first stamp (``output_x0``) to its last stamp, the stamps lagging the kept
    windows' ends by the averaging delay (e2e). The analysed time, where injections count."""
    dx = geometry.stride_seconds
    spans = []
    for stretch in stretches:
        kept = stretch.kept_windows(geometry)
        if kept:
            x0 = output_x0(geometry, stretch, "statistic")
            spans.append((x0 - dx, x0 + (kept - 1) * dx))
    return spans


def stretches_of(shares: list[ClientShare]) -> list[Stretch]:
    """The stretches the shares' pieces cover, in order."""
    bounds = {}
    for share in shares:
        for piece in share.pieces:
            bounds[piece.stretch] = (piece.stretch_gps_start, piece.stretch_gps_end)
    return [Stretch(i, *bounds[i]) for i in sorted(bounds)]


def whole_span(config: CampaignConfig) -> list[Stretch]:
    """The span as one stretch (no gaps), its end on the stride grid."""
    end = config.data.start + config.total_windows * config.stride_seconds
    return [Stretch(0, config.data.start, end)]


def make_stretches(geometry: StreamGeometry, bounds: list[tuple[float, float]]
                   ) -> list[Stretch]:
    """Number ``(gps_start, gps_end)`` bounds, checking they lie on the stride grid."""
    step = geometry.stride_seconds
    stretches = []
    for start, end in bounds:
        for gps in (start, end):
            offset = (gps - geometry.grid_gps_start) / step
            if abs(offset - round(offset)) > 1e-6:
                raise ValueError(f"stretch bound {gps} is not on the stride grid")
        stretches.append(Stretch(len(stretches), float(start), float(end)))
    return stretches


def stretch_piece(geometry: StreamGeometry, stretch: Stretch, first_window: int,
                  output_start: int, output_stop: int, sequence_id: int = 0,
                  part: Stretch | None = None) -> Piece:
    """The piece that streams windows ``[first_window, output_stop)`` of ``stretch`` (numbered
    from its start) and keeps ``[output_start, output_stop)``. ``part``: the part of the
    stretch left by gaps that the stream reads within (``sub_pieces``; default the stretch)."""
    step = geometry.stride_seconds
    part = stretch if part is None else part
    return Piece(
        stretch=stretch.index, sequence_id=sequence_id, first_window=first_window,
        output_start=output_start, output_stop=output_stop,
        gps_start=stretch.gps_start + first_window * step,
        gps_end=stretch.gps_start + output_stop * step,
        stretch_gps_start=part.gps_start, stretch_gps_end=part.gps_end)


def piece_off_its_stretch(geometry: StreamGeometry, piece: Piece) -> str | None:
    """Why a job spec's ``piece`` is not one make-dag plans on ``geometry``'s grid (for a
    sentence "piece N ..."): it keeps windows past the end of its stretch, or its GPS span is
    not that of its windows; None when it is (``job_specs.piece_damage`` checks what needs no
    grid)."""
    stretch = Stretch(piece.stretch, piece.stretch_gps_start, piece.stretch_gps_end)
    if piece.output_stop > (windows := stretch.windows(geometry)):
        return f"keeps windows up to {piece.output_stop}, past the {windows} of its stretch"
    planned = stretch_piece(geometry, stretch, piece.first_window, piece.output_start,
                            piece.output_stop)
    if max(abs(planned.gps_start - piece.gps_start), abs(planned.gps_end - piece.gps_end)) > 1e-6:
        return (f"streams GPS [{piece.gps_start}, {piece.gps_end}), not its windows' "
                f"[{planned.gps_start}, {planned.gps_end})")
    return None


def client_shares(
    config: CampaignConfig,
    stretches: list[Stretch] | None = None,
    sequence_base: int = 0,
) -> list[ClientShare]:
    """Split the stretches' kept windows into ``servers * clients_per_server`` shares.

    Parameters
    ----------
    config
        The campaign.
    stretches
        The analysable stretches (default: the whole span as one stretch).
    sequence_base
        Added to every sequence ID, so that two campaigns sharing a server cannot collide.

    Returns
    -------
    The client shares in time order; client ``i`` is served by server
    ``i // clients_per_server``. Shares differ by at most one window.
    """
    stretches = whole_span(config) if stretches is None else stretches
    per_server = config.layout.clients_per_server
    count = config.layout.servers * per_server
    kept = [s.kept_windows(config.geometry) for s in stretches]
    total = sum(kept)
    if total < count:
        raise ConfigError(
            f"{config.source}: the analysable data holds {total} windows, fewer than the "
            f"{count} client shares of the layout (layout.servers × layout.clients_per_server)"
        )
    bounds = [round(i * total / count) for i in range(count + 1)]
    warmup, history = config.stretch_warmup_windows, config.warmup_windows
    # (global index of a stretch's first kept window) for mapping shares onto stretches
    starts = [sum(kept[:i]) for i in range(len(stretches))]
    shares, sequence = [], sequence_base
    for i in range(count):
        pieces = []
        for stretch, first_kept, n_kept in zip(stretches, starts, kept, strict=True):
            lo = max(bounds[i], first_kept) - first_kept
            hi = min(bounds[i + 1], first_kept + n_kept) - first_kept
            if hi <= lo:
                continue
            output_start, output_stop = lo + warmup, hi + warmup
            sequence += 1
            pieces.append(stretch_piece(config.geometry, stretch, max(0, output_start - history),
                                        output_start, output_stop, sequence))
        shares.append(
            ClientShare(
                index=i,
                node=client_name(i),
                server=server_name(i // per_server),
                pieces=tuple(pieces),
            )
        )
    return shares


def sub_pieces(geometry: StreamGeometry, piece: Piece, effective: Sequence[Stretch]
               ) -> list[Piece]:
    """The streams of a piece once its stretch is cut by gaps (``data.on_bad_file = "gap"``).

    ``effective`` are the parts left of the piece's stretch (``segments.without_bad_files``;
    others are ignored). One stream per part holding some of the piece's kept windows: those
    windows, with a warm-up (and slide history) of their own inside the part, read within the
    part's bounds. Windows keep the piece's stretch's numbering, so a stream's rows are the
    piece's rows. With the stretch whole, the piece itself.
    """
    step = geometry.stride_seconds
    warmup, history = geometry.stretch_warmup_windows, geometry.warmup_windows
    planned = Stretch(piece.stretch, piece.stretch_gps_start, piece.stretch_gps_end)
    found = []
    for part in effective:
        if part.gps_end <= piece.stretch_gps_start or part.gps_start >= piece.stretch_gps_end:
            continue
        offset = round((part.gps_start - piece.stretch_gps_start) / step)
        a = max(piece.output_start, offset + warmup)
        b = min(piece.output_stop, offset + part.windows(geometry))
        if b <= a:
            continue
        found.append(stretch_piece(geometry, planned, max(offset, a - history), a, b,
                                   piece.sequence_id, part))
    return found


def part_offset(geometry: StreamGeometry, piece: Piece) -> int:
    """Windows from the start of a piece's planned stretch to the start of the part of it
    (``sub_pieces``) the piece streams in."""
    return round((piece.stretch_gps_start - piece.gps_start) / geometry.stride_seconds
                 + piece.first_window)


def request_sizes(windows: int, batch_size: int) -> list[int]:
    """Windows carried by each request of a stream: full batches, then the remainder."""
    full, rest = divmod(windows, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


FOREGROUND_SEQUENCE_BASE = 1 << 62
"""Foreground sequence IDs (``search.inject``) start here: above the background's (below
``2**51``, ``workflow/make_dag.py``), below Triton's ``2**63``."""


def foreground_pieces(geometry: StreamGeometry, stretch: Stretch, gps_times: Sequence[float],
                      reach_seconds: float) -> list[Piece]:
    """The foreground streams of a stretch (``search.inject``): for each injection time, the
    kept windows whose statistic lies within ``reach_seconds`` of it (where it is found), those
    of nearby injections merged into one, each streamed from ``stretch_warmup_windows`` before
    as a piece (the warm-up and whitening history, clipped at the stretch's start), so its
    statistic equals the uninterrupted stream's there. The foreground keeps the zero lag only,
    so unlike a background piece (``client_shares``) it streams no slide history. Sequence IDs
    0: the caller numbers them."""
    step = geometry.stride_seconds
    warmup = history = geometry.stretch_warmup_windows
    windows = stretch.windows(geometry)
    first_end = float(statistic_row_gps(geometry, stretch.gps_start, 0))
    spans: list[list[int]] = []
    for gps in sorted(gps_times):
        a = max(warmup, int(np.ceil((gps - reach_seconds - first_end) / step - 1e-9)))
        b = min(windows, int(np.floor((gps + reach_seconds - first_end) / step + 1e-9)) + 1)
        if b <= a:
            continue
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    return [stretch_piece(geometry, stretch, max(0, a - history), a, b) for a, b in spans]


def foreground_windows(geometry: StreamGeometry, stretches: Sequence[Stretch],
                       gps_times: Sequence[float], reach_seconds: float) -> int:
    """Windows the foreground streams (``foreground_pieces``' warm-up and found windows,
    merged) over ``stretches`` for the injections at ``gps_times``."""
    return sum(p.windows for s in stretches
               for p in foreground_pieces(geometry, s, gps_times, reach_seconds))


def foreground_windows_per_second(geometry: StreamGeometry, injections_per_second: float,
                                  reach_seconds: float, evenly_spaced: bool = False) -> float:
    """Expected windows the foreground streams per analysed second at a rate of injections.

    Each injection streams its found windows (those within ``reach_seconds``: the campaign's
    found window), ``F = 2 reach_seconds / stride`` on average, after
    a warm-up of ``H = stretch_warmup_windows``; one whose found windows meet the previous
    one's extends its piece by the gap ``g`` between them instead (``foreground_pieces``). With
    times at random (a Poisson process of rate ``r``) an injection costs on average
    ``(F + H) exp(-r L) + (1 - exp(-r L) (1 + r L)) / (r S)`` windows, ``L = 2 reach_seconds``,
    ``S`` the stride (s); ``evenly_spaced`` ones ``1 / r`` apart, ``F + H`` if ``1 / r > L``
    (else ``1 / (r S)``). The stretches' ends are left out.
    """
    if injections_per_second <= 0:
        return 0.0
    stride = geometry.stride_seconds
    reach = 2 * reach_seconds
    alone = reach / stride + geometry.stretch_warmup_windows
    if evenly_spaced:
        interval = 1 / injections_per_second
        return injections_per_second * (alone if interval > reach else interval / stride)
    x = injections_per_second * reach
    merged = (1 - np.exp(-x) * (1 + x)) / (injections_per_second * stride)
    return float(injections_per_second * (alone * np.exp(-x) + merged))
