"""Which frame files each channel is read from (``file_groups``).

An observatory's channels may be kept in several frame types: DeepClean's witnesses in the
raw frames (``H1_R``), the strain in h(t) (``H1_HOFT_C01``). A file's frame type is the
description in its name (``H-H1_R-1262304000-64.gwf`` is of type ``H1_R``). Which of the
campaign's channels a frame type holds is what its first file in time lists, or the next
that can be read, of the first ``LISTING_TRIES`` (``first_listing``: ``check`` and every
reader judge a type by the same file, listed by ``frames.listed_channels``, a table of
contents read in the frame reader process); channels held by the same frame types form one
``FileGroup``, read together from those types' files, joined end to end.

- An observatory with one frame type opens no file here: every channel of it is read from its
  files, and a channel missing from them is named by the read or the check, as before.
- A channel no frame type holds is a group of no files (``orphans``): the check names it
  (``unheld_problems``), a read finds no file for it.
- A frame type whose first files cannot be read is a group of no channels (``unreadable``):
  its files may hold a channel, and an unrelated type's cannot be told from one of ours, so
  the check and a read that meets its files name it (``unreadable_problem``).
- A channel two frame types hold is read from both, joined end to end (C00 for one month, C01
  for the next); where both cover one time the reader would mix them, which
  ``overlap_problems`` refuses.
- Without ``Listed`` (``make-dag --no-check`` opens no file) an observatory's several frame
  types are each a group of all its channels: time is planned only where every type has
  files, which is why ``untold_types`` asks for ``data.frametypes`` then.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from igwn_segments import segmentlist

from offline_iaas.data.discovery import (
    FilesInTime,
    FrameFile,
    files_per_interval,
    path_problem,
    printable,
    time_order,
)
from offline_iaas.data.segments import gps_segments, observatories, observatory_of
from offline_iaas.errors import names_text
from offline_iaas.gps import gps_range_text

Listed = Callable[[FrameFile, Sequence[str]], tuple[str, ...] | None]
"""Which of ``channels`` a frame file's table of contents lists; None when it cannot be
read."""
LISTING_TRIES = 3
"""Files of a frame type asked in turn (``first_listing``): a year of partial copies is not
read file by file, each crash or hang restarting the frame reader."""


@dataclass(frozen=True)
class FileGroup:
    """Channels of one observatory read together, and the files they are read from."""

    observatory: str
    channels: tuple[str, ...]
    files: tuple[FrameFile, ...]
    """In time order (start, end, path)."""
    frame_types: tuple[str, ...]
    """The frame types of ``files`` (descriptions: ``H1_R``), in order of their names; none
    for channels no frame type holds."""
    alone: bool
    """Whether its observatory's files are of one frame type (messages then speak of the
    observatory, not of channels and frame types)."""

    def what(self) -> str:
        """What the group's files hold, for messages: ``observatory H's data`` when its
        observatory's files are of one frame type, else its channels and frame type(s)."""
        if self.alone:
            return f"observatory {self.observatory}'s data"
        return f"{names_text(self.channels, shown=3)} (frame type {', '.join(self.frame_types)})"

    def within(self, gps_start: float, gps_end: float) -> FileGroup:
        """The group with the files that overlap ``[gps_start, gps_end)`` (a read's)."""
        return replace(self, files=tuple(self._in_time.overlapping(gps_start, gps_end)))

    @cached_property
    def _in_time(self) -> FilesInTime:
        return FilesInTime(self.files)

    @property
    def orphans(self) -> bool:
        """Whether these are channels none of the observatory's frame types holds."""
        return not self.alone and not self.frame_types

    @property
    def unreadable(self) -> bool:
        """Whether this is a frame type whose first files cannot be read (``first_listing``:
        no channels)."""
        return not self.channels


def first_listing(files: Sequence[FrameFile], channels: Sequence[str], listed: Listed
                  ) -> tuple[FrameFile, tuple[str, ...]] | None:
    """Which of ``channels`` a frame type holds: what its first file in time lists, or the
    next that can be read, of the first ``LISTING_TRIES``; with the file that said so. None
    when none of them can be read."""
    for f in sorted(files, key=time_order)[:LISTING_TRIES]:
        names = listed(f, channels)
        if names is not None:
            return f, names
    return None


def frame_types_of(frames: Sequence[FrameFile], observatory: str) -> dict[str, list[FrameFile]]:
    """An observatory's files by frame type (in the order given)."""
    by_type: dict[str, list[FrameFile]] = {}
    for f in frames:
        if observatory in f.observatory:
            by_type.setdefault(f.description, []).append(f)
    return by_type


def file_groups(frames: Sequence[FrameFile], channels: Sequence[str], listed: Listed | None
                ) -> list[FileGroup]:
    """The ``channels`` in groups read from the same ``frames`` (module docstring), in order of
    the channels' observatories; within one, in order of the channels.

    Parameters
    ----------
    frames
        The frame files (those of other observatories are ignored).
    channels
        The channels to read.
    listed
        What a frame file lists (``first_listing``), asked only of an observatory with
        several frame types; None: unknown (each type then a group of all the observatory's
        channels).
    """
    groups: list[FileGroup] = []
    for observatory in observatories(channels):
        names = tuple(c for c in channels if observatory_of(c) == observatory)
        by_type = frame_types_of(frames, observatory)
        kinds = sorted(by_type)

        def files_of(holders: Sequence[str], by_type=by_type) -> tuple[FrameFile, ...]:
            return tuple(sorted((f for kind in holders for f in by_type[kind]), key=time_order))

        if len(kinds) <= 1:
            groups.append(FileGroup(observatory, names, files_of(kinds), tuple(kinds), True))
            continue
        if listed is None:
            groups += [FileGroup(observatory, names, files_of([kind]), (kind,), False)
                       for kind in kinds]
            continue
        held = {kind: first_listing(by_type[kind], names, listed) for kind in kinds}
        sources: dict[tuple[str, ...], list[str]] = {}
        for name in names:
            holders = tuple(kind for kind in kinds if held[kind] and name in held[kind][1])
            sources.setdefault(holders, []).append(name)
        groups += [FileGroup(observatory, tuple(members), files_of(holders), holders, False)
                   for holders, members in sources.items()]
        groups += [FileGroup(observatory, (), files_of([kind]), (kind,), False)
                   for kind in kinds if held[kind] is None]
    return groups


def unreadable_problem(group: FileGroup) -> str:
    """What a check or a read says of a frame type whose first files cannot be read (the
    problem of the first's name, if LALFrame cannot take it)."""
    (kind,) = group.frame_types
    first = group.files[0]
    odd = path_problem(first)  # a name LALFrame cannot take makes a frame type of its own
    if odd is not None:
        return odd
    tried = min(len(group.files), LISTING_TRIES)
    return (f"the first {tried} frame file(s) of type {kind} cannot be read "
            f"({printable(first.path)} first), so which channels it holds is not known: remove "
            "them, or list the frame types to read in data.frametypes")


def unheld_problems(group: FileGroup, frames: Sequence[FrameFile], listed: Listed) -> list[str]:
    """One message per channel no frame type of its observatory holds, naming the file each
    type was judged by (``first_listing``, asked again: ``listed`` caches what it read)."""
    judged = []
    for kind, files in sorted(frame_types_of(frames, group.observatory).items()):
        found = first_listing(files, group.channels, listed)
        judged.append(f"{kind} {printable(found[0].path)}" if found else f"{kind} unreadable")
    return [f"channel {name} is listed by none of observatory {group.observatory}'s frame "
            f"types (what a type holds is what its first readable file lists: "
            f"{', '.join(judged)})" for name in group.channels]


def frame_counts_text(frames: Sequence[FrameFile]) -> str:
    """How many files of each observatory field (``H: 4, L: 4``), or of each frame type where
    an observatory has several (``H1_HOFT: 4, H1_R: 4, ...``), for ``check``'s summary."""
    letters = {letter for f in frames for letter in f.observatory}
    by_type = any(len(frame_types_of(frames, letter)) > 1 for letter in letters)
    counts: dict[str, int] = {}
    for f in frames:
        key = f.description if by_type else f.observatory
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{printable(key)}: {n}" for key, n in sorted(counts.items()))


def untold_types(frames: Sequence[FrameFile], channels: Sequence[str]) -> list[str]:
    """Without opening files (``make-dag --no-check``), one message per observatory with
    several frame types: which holds which channel is not known, so ``data.frametypes`` must
    say which to read (each is then needed wherever the campaign reads)."""
    problems = []
    for observatory in observatories(channels):
        kinds = sorted(frame_types_of(frames, observatory))
        if len(kinds) > 1:
            problems.append(
                f"observatory {observatory} has frame files of {len(kinds)} frame types "
                f"({names_text(kinds)}), and which holds which channel is read from the files, "
                "which --no-check does not open: list the frame types to read in "
                "data.frametypes (each is then needed wherever the campaign reads), or run "
                "without --no-check")
    return problems


def coverage(groups: Sequence[FileGroup], left_out: Collection = ()) -> dict[str, segmentlist]:
    """Per observatory letter, the GPS intervals where every group of it has files (a
    group's files joined; files whose path is in ``left_out`` are gaps; channels no frame
    type holds, and frame types none of whose files can be read, are left to the check,
    which names them)."""
    found: dict[str, segmentlist] = {}
    for group in (g for g in groups if not g.orphans and not g.unreadable):
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
    datafind server's are chosen by ``data.frametypes`` alone); in time order, then by
    observatory."""
    found: list[tuple[float, str, str]] = []
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
            found.append((lo, group.observatory,
                          f"frame files {a.path} and {b.path} both hold {group.what()} for "
                          f"{gps_range_text(lo, hi)}{more}, and the reader would mix them: "
                          f"{why}"))
    return [text for _, _, text in sorted(found, key=lambda p: p[:2])]
