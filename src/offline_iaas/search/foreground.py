"""The foreground of a campaign with injections on the fly (``search.inject``): which windows
each client streams a second time, with the set's signals added (``search/onthefly.py``).

Per stretch, ``stretches.foreground_pieces`` of the injections' times: the windows where an
injection is found (``search.found_seconds`` around it) with their warm-up. A foreground piece
belongs to the client share whose piece owns its first kept window, so the pieces, and their
output, are the same for every split and for the reference (one stream per stretch). Their
sequence IDs are disjoint from the background's: ``FOREGROUND_SEQUENCE_BASE + 2**10 *`` the
owning piece's ID ``+`` the piece's number in it modulo ``2**10`` (a client streams its foreground
pieces one after the other, a few requests in flight: two live at once never share an ID).
"""

from __future__ import annotations

from dataclasses import replace

from offline_iaas.config_sections import SearchConfig
from offline_iaas.geometry import StreamGeometry
from offline_iaas.records import ClientShare, Piece
from offline_iaas.search.injection_list import read_campaign_injections
from offline_iaas.stretches import FOREGROUND_SEQUENCE_BASE, Stretch, foreground_pieces

PER_PIECE = 1 << 10
"""Foreground sequence IDs per background piece (module docstring)."""


def injection_times(search: SearchConfig) -> list[float]:
    """The geocentre GPS times of ``search.injections`` (none unless ``search.inject``)."""
    if not search.inject or search.injections is None:
        return []
    listed = read_campaign_injections(search.injections)
    return [i.gps_time for i in listed.injections]


def stretch_foreground(geometry: StreamGeometry, search: SearchConfig, stretch: Stretch,
                       times: list[float]) -> list[Piece]:
    """A stretch's foreground pieces (sequence ID 0), those within ``search.found_seconds``
    of an injection."""
    return foreground_pieces(geometry, stretch, times, search.found_seconds)


def share_foreground(geometry: StreamGeometry, search: SearchConfig, share: ClientShare,
                     times: list[float]) -> list[Piece]:
    """The foreground pieces a share streams, with their sequence IDs (module docstring)."""
    found = []
    for piece in share.pieces:
        stretch = Stretch(piece.stretch, piece.stretch_gps_start, piece.stretch_gps_end)
        owned = [p for p in stretch_foreground(geometry, search, stretch, times)
                 if piece.output_start <= p.output_start < piece.output_stop]
        found += [replace(p, sequence_id=FOREGROUND_SEQUENCE_BASE
                          + PER_PIECE * piece.sequence_id + j % PER_PIECE)
                  for j, p in enumerate(owned)]
    return found
