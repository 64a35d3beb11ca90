"""Checks of a campaign's inputs before anything runs: ``preflight`` lists every problem with
the frames at once (missing or unreadable files, missing channels, unusable rates, unexplained
holes) and returns the analysable span (``offline_iaas.data.segments``). Each file is probed
(its frames' span against its name, a short read) in the frame reader process
(``gwf_reader``), killed if it hangs. The injection list is the search's own check
(``search/injection_check.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from igwn_segments import segmentlist

from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import (
    FrameFile,
    coverage_holes,
    discover_frames,
    files_per_interval,
    frame_source,
    path_problem,
    rate_factor,
)
from offline_iaas.data.frame_types import (
    FileGroup,
    coverage,
    file_groups,
    overlap_problems,
    unheld_problems,
    unreadable_problem,
    untold_types,
)
from offline_iaas.data.frames import listed_channels
from offline_iaas.data.gwf_reader import PROBE_TIMEOUT_SECONDS, reader
from offline_iaas.data.segments import AnalysableSpan, gps_segments, observatory_of
from offline_iaas.errors import DataError, not_a_regular_file
from offline_iaas.gps import gps_range_text
from offline_iaas.records import BadFile

PROBE_SECONDS = 1.0
"""Data read from each frame file by ``preflight`` to prove it is readable."""


# ---- checks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    """What a probe of one frame file found: which of the channels asked for it lists, the
    first few it lists (for messages), their rates, or an error."""

    names: tuple[str, ...] = ()
    listing: str = ""
    rates: tuple[tuple[str, float], ...] = ()
    error: str = ""


_PROBES: dict[tuple, _Probe] = {}
"""Probe results by (path, mtime_ns, size, channels, start, seconds)."""


def _probe_files(jobs: Sequence[tuple[FrameFile, tuple[str, ...], float]]) -> list[_Probe]:
    """Probe results for ``(file, channels, seconds)`` jobs (cached per file), each in the
    frame reader process (``gwf_reader``: a crash or a hang is the file's error)."""
    keys = []
    for f, names, seconds in jobs:
        stat = f.path.stat()
        keys.append((str(f.path), stat.st_mtime_ns, stat.st_size, names, f.gps_start, seconds,
                     f.gps_end))
    for key in dict.fromkeys(keys):
        if key not in _PROBES:
            path, _, _, names, gps_start, seconds, gps_end = key
            found = reader().probe(path, names, gps_start, seconds, (gps_start, gps_end),
                                   PROBE_TIMEOUT_SECONDS)
            _PROBES[key] = _Probe(tuple(found.get("names", ())), found.get("listing", ""),
                                  tuple(sorted(found.get("rates", {}).items())),
                                  found.get("error", ""))
    return [_PROBES[k] for k in keys]


def _probe_of(f: FrameFile, channels: Sequence[str]) -> tuple[FrameFile, tuple[str, ...], float]:
    """The probe job of one file: every channel of the observatories it holds, a short read."""
    return f, tuple(c for c in channels if observatory_of(c) in f.observatory), \
        min(f.duration, PROBE_SECONDS)


def channel_groups(frames: Sequence[FrameFile], channels: Sequence[str], open_files: bool = True
                   ) -> list[FileGroup]:
    """``frame_types.file_groups`` of ``channels``, each frame type of an observatory with
    several judged by its tables of contents as every reader of the campaign judges it
    (``frames.listed_channels``); without ``open_files``, unknown."""
    return file_groups(frames, channels, listed_channels if open_files else None)


def _more(count: int, what: str) -> str:
    return f" and {count} more {what}" if count else ""


def frame_problems(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    needed: Sequence[tuple[float, float]],
    sample_rate: float,
    science: bool = False,
    report_holes: bool = True,
    open_files: bool = True,
    bad: list[tuple[FrameFile, str]] | None = None,
    groups: Sequence[FileGroup] | None = None,
) -> list[str]:
    """Every problem with the frames over the ``needed`` GPS intervals, one message each.

    Checked per group of ``channels`` read from the same files (``channel_groups``: an
    observatory's, or those of its channels kept in the same frame types): holes in the
    coverage of its files inside ``needed``, and files of it that overlap inside one interval
    of ``needed`` (``overlap_problems``); for every file overlapping ``needed``: LALFrame can
    open its path (``path_problem``), it exists, its table of contents and a read of
    ``PROBE_SECONDS`` of its data succeed (in a worker process, as a corrupt file can crash
    LALFrame), it lists every channel of its groups, and each channel's rate is a
    whole multiple of ``sample_rate`` and the same in all its files that overlap one
    interval of ``needed`` (each is read, and resampled, on its own). Missing channels and
    bad rates are reported once per channel (and rate), naming the first file and how many
    more; holes and bad files one by one. Files outside ``needed`` are not looked at, but for
    the first (or first readable) file of each frame type of an observatory with several, whose
    table of contents says what the type holds (``channel_groups``). A frame type whose first
    files cannot be read is one problem where it has files inside ``needed`` (and its time is
    not called a hole in the others).

    Parameters
    ----------
    science
        Whether ``needed`` came from science segments (only changes the wording of holes).
    report_holes
        Whether holes in the coverage are problems.
    open_files
        Whether to check the files themselves (exist, readable, channels, rates); without,
        only the coverage their names give is checked (``make-dag --no-check``).
    bad
        Given (``data.on_bad_file = "gap"``), a file the frame library cannot read or that
        lies about its span is appended to it with its problem, instead of being a problem.
    groups
        ``channel_groups(frames, channels, open_files)``, if already found.
    """
    needed = gps_segments(needed)
    if groups is None:
        groups = channel_groups(frames, channels, open_files)
    problems, wanted = _coverage_problems(groups, frames, needed, science, report_holes)
    jobs = [(f, tuple(names)) for f, names in wanted.values()]
    odd = {f.path: path_problem(f) for f, _ in jobs}  # LALFrame cannot open these: not probed
    problems += [p for p in dict.fromkeys(odd.values()) if p is not None]

    def overlapping(left_out: set) -> list[str]:  # by their names, files left out as bad aside
        kept = [dataclasses.replace(g, files=tuple(
            f for f in g.files if f.path in wanted and f.path not in left_out)) for g in groups]
        return overlap_problems(kept, needed)

    if not open_files:
        return problems + overlapping(set())
    readable: list[tuple[FrameFile, tuple[str, ...]]] = []
    for f, names in jobs:
        if odd[f.path] is not None:
            continue
        # stat alone: a FIFO is named as one, never opened (its open waits for a writer)
        if (why := not_a_regular_file(f.path)) is None:
            readable.append((f, names))
        else:
            span = gps_range_text(f.gps_start, f.gps_end)
            problems.append(f"frame file {f.path} {span} {why}")
    probes = _probe_files([_probe_of(f, channels) for f, _ in readable])
    found = _ChannelsFound()
    for (f, names), probe in zip(readable, probes, strict=True):
        if not probe.error:
            found.add(f, names, probe, sample_rate)
            continue
        # a bad sample is named as such; anything else the reader said makes it unreadable
        what = ("" if probe.error.startswith("channel ") else
                ": " if probe.error.startswith("its name says") else "is unreadable: ")
        problem = f"frame file {f.path} {gps_range_text(f.gps_start, f.gps_end)} " \
            f"{what}{probe.error}"
        if bad is not None and not probe.error.startswith("channel "):
            bad.append((f, problem))
        else:
            problems.append(problem)
    problems += overlapping({f.path for f, _ in bad or []})
    return problems + [p for name in channels
                       for p in found.problems(name, needed, sample_rate)]


def _coverage_problems(groups: Sequence[FileGroup], frames: Sequence[FrameFile],
                       needed: segmentlist, science: bool, report_holes: bool
                       ) -> tuple[list[str], dict[Path, tuple[FrameFile, list[str]]]]:
    """``frame_problems``' checks of the files' names: frame types that cannot be read, channels
    no type holds, holes in each group's coverage inside ``needed``; and each file inside
    ``needed``, with the channels to read from it."""
    problems: list[str] = []
    wanted: dict[Path, tuple[FrameFile, list[str]]] = {}  # each file read, and its channels
    unreadable: dict[str, segmentlist] = {}  # where a type that cannot be read has files
    for group in groups:
        if group.unreadable and any(files_per_interval(group.files, needed)):
            problems.append(unreadable_problem(group))
            mine = gps_segments((f.gps_start, f.gps_end) for f in group.files)
            unreadable[group.observatory] = mine | unreadable.get(group.observatory, mine)
    for group in groups:
        if group.orphans:
            problems += unheld_problems(group, frames, listed_channels)
        if group.orphans or group.unreadable:
            continue
        told = unreadable.get(group.observatory, segmentlist())  # named above, not a hole
        holes = coverage_holes(group.files, gps_segments(needed - told), group.observatory) \
            if report_holes else []
        kinds = "" if group.alone else f"; frame type {', '.join(group.frame_types)}"
        for a, b, where in holes:
            inside = ", inside the science segments" if science else ""
            problems.append(
                f"no frame data for observatory {group.observatory} "
                f"({', '.join(group.channels)}{kinds}) in {gps_range_text(a, b)}{inside} "
                f"({where})"
            )
        for files in files_per_interval(group.files, needed):
            for f in files:
                names = wanted.setdefault(f.path, (f, []))[1]
                names += [c for c in group.channels if c not in names]
    return problems, wanted


@dataclass
class _ChannelsFound:
    """What the probes of readable files found of each channel: files that do not list it
    (with the first listing, for the message), files whose rate is no whole multiple of the
    model's, and the usable rates by file."""

    missing: dict[str, list[FrameFile]] = dataclasses.field(default_factory=dict)
    listed: dict[str, str] = dataclasses.field(default_factory=dict)
    bad_rates: dict[str, list[tuple[FrameFile, float]]] = dataclasses.field(
        default_factory=dict)
    usable_rates: dict[str, list[tuple[FrameFile, float]]] = dataclasses.field(
        default_factory=dict)

    def add(self, f: FrameFile, names: Sequence[str], probe: _Probe, sample_rate: float
            ) -> None:
        """One readable file's probe of the channels ``names`` it should hold."""
        rates = dict(probe.rates)
        for name in names:
            if name not in probe.names:
                self.missing.setdefault(name, []).append(f)
                self.listed.setdefault(name, probe.listing)
            elif rate_factor(rates[name], sample_rate) is None:
                self.bad_rates.setdefault(name, []).append((f, rates[name]))
            else:
                self.usable_rates.setdefault(name, []).append((f, rates[name]))

    def problems(self, name: str, needed: segmentlist, sample_rate: float) -> list[str]:
        """Channel ``name``'s problems: missing from files, an unusable rate (each once,
        naming the first file and how many more), rates that differ within one interval of
        ``needed``."""
        problems = []
        if name in self.missing:
            first, last = self.missing[name][0], self.missing[name][-1]
            problems.append(
                f"channel {name} not found in {first.path}"
                f"{_more(len(self.missing[name]) - 1, 'file(s)')} covering "
                f"{gps_range_text(first.gps_start, last.gps_end)} "
                f"(channels there: {self.listed[name]})"
            )
        if name in self.bad_rates:
            first, rate = self.bad_rates[name][0]
            problems.append(
                f"channel {name} in {first.path}"
                f"{_more(len(self.bad_rates[name]) - 1, 'file(s)')} "
                f"has sample rate {rate:g} Hz, not a whole multiple of the model sample rate "
                f"{sample_rate:g} Hz"
            )
        rate_of = {f.path: rate for f, rate in self.usable_rates.get(name, ())}
        files = [f for f, _ in self.usable_rates.get(name, ())]
        mixed: dict[str, None] = {}
        for own in files_per_interval(files, needed):  # each interval read on its own
            if len({rate_of[f.path] for f in own}) > 1:
                mixed.update(dict.fromkeys(
                    _mixed_rate_problems(name, [(f, rate_of[f.path]) for f in own])))
        return problems + list(mixed)


def _mixed_rate_problems(name: str, found: Sequence[tuple[FrameFile, float]]) -> list[str]:
    """A channel whose files over one needed interval hold it at different rates (each a
    whole multiple of the model rate): the reader joins its files' samples end to end, so it
    would read a wrong span
    (``data for ... incomplete``). The rate most of its files have (the first file's on a
    tie) is taken as right; one problem per other rate, naming its first file."""
    counts: dict[float, int] = {}
    for _, rate in found:
        counts[rate] = counts.get(rate, 0) + 1
    usual = max(counts, key=lambda r: (counts[r], r == found[0][1]))
    holder = next(f for f, rate in found if rate == usual)
    problems = []
    for odd in (r for r in counts if r != usual):
        files = [f for f, rate in found if rate == odd]
        problems.append(
            f"channel {name} in {files[0].path}{_more(len(files) - 1, 'file(s)')} has sample "
            f"rate {odd:g} Hz, in its other files {usual:g} Hz ({holder.path}"
            f"{_more(counts[usual] - 1, 'file(s)')}): one channel's files must share one rate"
        )
    return problems


def problem_report(problems: Sequence[str], gps_start: float, gps_end: float, source: str) -> str:
    """One message: a single problem on one line; several as a summary line, then
    ``  - <problem>`` per line."""
    where = f"the frame data for {gps_range_text(gps_start, gps_end)} (frames: {source})"
    if len(problems) == 1:
        return f"{where}: {problems[0]}"
    head = f"{len(problems)} problems with {where}:"
    return "\n".join([head] + [f"  - {p}" for p in problems])


def preflight(
    config: CampaignConfig,
    frames: Sequence[FrameFile] | None = None,
    *,
    allow_holes_in_science: bool = False,
    open_files: bool = True,
    allow_bad_files: bool = False,
) -> AnalysableSpan:
    """Validate the campaign's data and return its analysable span.

    The frames are discovered (``discover_frames``, unless given) and the segment file read.
    The time that must hold data is the span intersected with the science segments (the whole
    span without a segment file); there, every hole in an observatory's frame coverage is a
    problem, as is every file that is missing, unreadable, lacks a channel or holds it at a
    rate that is not a whole multiple of the model rate (``frame_problems``). A hole outside
    the science segments is explained and only shows as dropped time. No analysable stretch
    at all is a problem too.

    Parameters
    ----------
    frames
        The frame files; default ``discover_frames(config.data)``.
    allow_holes_in_science
        With a segment file, accept holes inside its science segments too (they are dropped
        as ``no data for <obs>``). Without a segment file every hole is a problem regardless.
    open_files
        Check the files themselves; without, only the coverage their names give (planning
        where the frames are not reachable, ``make-dag --no-check``).
    allow_bad_files
        With ``data.on_bad_file = "gap"``, leave out a file the frame library cannot read or
        that lies about its span (its span is a gap, recorded in ``bad_files``) instead of
        listing it as a problem (``make-dag``, ``reference``; ``check`` lists it).

    Returns
    -------
    AnalysableSpan
        The stretches to analyse and the dropped time with reasons (``data.segments``).

    Raises
    ------
    DataError
        From discovery or the segment file; or one error listing every problem, each on its
        own line starting with ``"  - "`` and naming the file, channel or GPS range.
    """
    from offline_iaas.data.segments import (
        compute_stretches,
        gps_segments,
        min_stretch_seconds,
        science_segments,
    )

    data = config.data
    span = (data.start, data.start + data.duration)
    frames = discover_frames(data) if frames is None else list(frames)
    science = science_segments(config.data)
    needed = gps_segments([span])
    if science is not None:
        needed = gps_segments(needed & gps_segments(science))
    gaps = allow_bad_files and data.on_bad_file == "gap"
    bad: list[tuple[FrameFile, str]] | None = [] if gaps else None
    groups = channel_groups(frames, config.frame_channels, open_files)
    untold = [] if open_files or data.frametypes else untold_types(frames, config.frame_channels)
    problems = untold + frame_problems(
        frames,
        config.frame_channels,
        needed,
        data.sample_rate,
        science=science is not None,
        report_holes=science is None or not allow_holes_in_science,
        open_files=open_files,
        bad=bad,
        groups=groups,
    )
    left_out = {f.path for f, _ in bad or []}  # a bad file's span is a gap
    result = compute_stretches(
        span,
        coverage(groups, left_out),
        science,
        data.start,
        config.stride_seconds,
        min_stretch_seconds(config.geometry),
    )
    result = dataclasses.replace(result, bad_files=[
        BadFile(str(f.path), f.gps_start, f.gps_end, problem) for f, problem in bad or []])
    if not result.stretches:
        reasons = "; ".join(f"{r}: {s:g} s" for r, s in result.dropped_by_reason().items())
        problems.append(f"no analysable time in {gps_range_text(*span)} ({reasons})")
    if problems:
        raise DataError(problem_report(problems, span[0], span[1], frame_source(config.data)))
    return result
