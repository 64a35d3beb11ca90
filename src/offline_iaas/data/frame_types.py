"""Which frame files each channel is read from (``file_groups``).

An observatory's channels may be kept in several frame types: DeepClean's witnesses in the
raw frames (``H1_R``), the strain in h(t) (``H1_HOFT_C01``). A file's frame type is the
description in its name (``H-H1_R-1262304000-64.gwf`` is of type ``H1_R``). Which channels a
frame type holds is read from the table of contents of one of its files (``holds``: the
caller's choice of file and reader); channels held by the same frame types form one
``FileGroup``, read together from those types' files, joined end to end.

- An observatory with one frame type opens no file here: every channel of it is read from its
  files, and a channel missing from them is named by the read or the check, as before.
- A channel no frame type holds is read from the first type's files (by name), so that the
  read or the check names it missing there, listing what that file holds.
- A frame type none of whose files can be read is read for every channel (the read or the
  check names the files' problem).
- A channel two frame types hold is read from both, joined end to end (C00 for one month, C01
  for the next); where both cover one time the reader would mix them, which
  ``discovery.overlap_problems`` refuses.
- Without ``holds`` (``make-dag --no-check`` opens no file) an observatory's several frame
  types are each a group of all its channels: time is planned only where every type has files.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from igwn_segments import segmentlist

from offline_iaas.data.discovery import FrameFile, files_per_interval
from offline_iaas.data.segments import gps_segments, observatories, observatory_of
from offline_iaas.errors import names_text
from offline_iaas.gps import gps_range_text

Holds = Callable[[Sequence[FrameFile]], Collection[str] | None]
"""The channel names one frame type holds, given its files in time order; None when none of
them can be read (the type is then read for every channel, so that the read or the check
names its files' problem)."""


@dataclass(frozen=True)
class FileGroup:
    """Channels of one observatory read together, and the files they are read from."""

    observatory: str
    channels: tuple[str, ...]
    files: tuple[FrameFile, ...]
    """In time order (start, end, path)."""
    frame_types: tuple[str, ...]
    """The frame types of ``files`` (descriptions: ``H1_R``), in order of their names."""
    alone: bool
    """Whether its observatory's files are of one frame type (messages then speak of the
    observatory, not of channels and frame types)."""

    def what(self) -> str:
        """What the group's files hold, for messages: ``observatory H's data`` when its
        observatory's files are of one frame type, else its channels and frame type(s)."""
        if self.alone:
            return f"observatory {self.observatory}'s data"
        return f"{names_text(self.channels, shown=3)} (frame type {', '.join(self.frame_types)})"


def first_listing(listed: Callable[[FrameFile], Collection[str] | None]) -> Holds:
    """A ``Holds`` that asks ``listed`` of a frame type's files in turn: the first that
    answers (not None) speaks for the type."""
    def holds(files: Sequence[FrameFile]) -> Collection[str] | None:
        return next((names for names in map(listed, files) if names is not None), None)
    return holds


def _time_order(f: FrameFile) -> tuple[float, float, str]:
    return f.gps_start, f.gps_end, str(f.path)


def file_groups(frames: Sequence[FrameFile], channels: Sequence[str],
                holds: Holds | None) -> list[FileGroup]:
    """The ``channels`` in groups read from the same ``frames`` (module docstring), in order of
    the channels' observatories; within one, in order of the channels.

    Parameters
    ----------
    frames
        The frame files to choose from (those of other observatories are ignored).
    channels
        The channels to read.
    holds
        The names a frame type holds, asked only of an observatory with several frame types;
        None: unknown (each type then a group of all the observatory's channels).
    """
    groups: list[FileGroup] = []
    for observatory in observatories(channels):
        names = tuple(c for c in channels if observatory_of(c) == observatory)
        by_type: dict[str, list[FrameFile]] = {}
        for f in sorted((f for f in frames if observatory in f.observatory), key=_time_order):
            by_type.setdefault(f.description, []).append(f)
        kinds = sorted(by_type)
        if len(kinds) <= 1:
            files = tuple(f for kind in kinds for f in by_type[kind])
            groups.append(FileGroup(observatory, names, files, tuple(kinds), True))
            continue
        if holds is None:
            groups += [FileGroup(observatory, names, tuple(by_type[kind]), (kind,), False)
                       for kind in kinds]
            continue
        held = {kind: holds(by_type[kind]) for kind in kinds}
        sources: dict[tuple[str, ...], list[str]] = {}
        for name in names:
            found = {kind for kind in kinds if held[kind] is not None and name in held[kind]}
            holders = tuple(kind for kind in kinds if kind in found or held[kind] is None
                            or (not found and kind == kinds[0]))
            sources.setdefault(holders, []).append(name)
        for holders, members in sources.items():
            files = tuple(sorted((f for kind in holders for f in by_type[kind]),
                                 key=_time_order))
            groups.append(FileGroup(observatory, tuple(members), files, holders, False))
    return groups


def coverage(groups: Sequence[FileGroup], left_out: Collection = ()) -> dict[str, segmentlist]:
    """Per observatory letter, the GPS intervals where every group of it has files (a
    group's files joined; files whose path is in ``left_out`` are gaps)."""
    found: dict[str, segmentlist] = {}
    for group in groups:
        covered = gps_segments((f.gps_start, f.gps_end) for f in group.files
                               if f.path not in left_out)
        mine = found.get(group.observatory)
        found[group.observatory] = covered if mine is None else gps_segments(mine & covered)
    return found


def overlapping_pairs(group: FileGroup, needed: Sequence[tuple[float, float]]
                      ) -> list[tuple[FrameFile, FrameFile, float, float]]:
    """Pairs of the group's files both overlapping one of the ``needed`` GPS intervals (each
    read on its own: a pair overlapping only between two is never joined) whose spans
    overlap (by more than round-off), each as ``(earlier, later, lo, hi)`` with ``[lo, hi)``
    the GPS span both cover: the reader joins a group's files end to end, so two covering
    one time would be mixed. Each pair once, in time order."""
    pairs: dict[tuple, tuple[FrameFile, FrameFile, float, float]] = {}
    for own in files_per_interval(group.files, needed):
        reaching = None  # the file so far that reaches furthest
        for f in own:
            if reaching is not None and f.overlaps(reaching.gps_start, reaching.gps_end):
                pairs.setdefault((reaching.path, f.path), (
                    reaching, f, f.gps_start, min(reaching.gps_end, f.gps_end)))
            if reaching is None or f.gps_end > reaching.gps_end:
                reaching = f
    return sorted(pairs.values(), key=lambda p: p[2])


def overlap_problems(groups: Sequence[FileGroup], needed: Sequence[tuple[float, float]]
                     ) -> list[str]:
    """One message per group and pair of frame types whose files overlap inside one of the
    ``needed`` GPS intervals (``overlapping_pairs``): its first pair of files and the span
    both cover, how many more such pairs, and what to keep (by where the files came from: a
    datafind server's are chosen by ``data.frametypes`` alone)."""
    problems = []
    for group in groups:
        by_types: dict[tuple[str, ...], list[tuple[FrameFile, FrameFile, float, float]]] = {}
        for a, b, lo, hi in overlapping_pairs(group, needed):
            by_types.setdefault(tuple(sorted({a.description, b.description})), []).append(
                (a, b, lo, hi))
        for kinds, pairs in by_types.items():
            a, b, lo, hi = pairs[0]
            more = f" (and {len(pairs) - 1} more such pair(s))" if len(pairs) > 1 else ""
            if len(kinds) == 1:
                why = f"frame type {kinds[0]} twice (a copy, or a misnamed file); keep one"
            elif a.listed_by_datafind and b.listed_by_datafind:
                why = (f"two frame types, {kinds[0]} and {kinds[1]}; ask for one of them in "
                       "data.frametypes")
            else:
                why = (f"two frame types, {kinds[0]} and {kinds[1]}; keep one of them (move "
                       "the other's files out of data.frames, or list the frame types to read "
                       "in data.frametypes)")
            problems.append(f"frame files {a.path} and {b.path} both hold {group.what()} "
                            f"for {gps_range_text(lo, hi)}{more}, and the reader would mix "
                            f"them: {why}")
    return problems
