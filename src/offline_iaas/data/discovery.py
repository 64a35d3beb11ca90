"""Frame files: where they are and which GPS interval each covers.

From a directory tree of ``.gwf`` files, a LAL cache or an FFL file (``find_frames``), or a
gwdatafind server (``datafind_frames``); ``discover_frames`` picks by the config. A file's
interval comes from its name (``OBS-DESC-GPS-DURATION.gwf``) or its cache entry, its frame
type is the ``DESC`` (which channels each type holds: ``frame_types``).
"""

from __future__ import annotations

import bisect
import math
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlparse

from offline_iaas.bounded_read import read_text
from offline_iaas.config_sections import DataConfig
from offline_iaas.data.segments import GPS_TOLERANCE_SECONDS, gps_segments
from offline_iaas.errors import DataError, names_text
from offline_iaas.gps import gps_range_text

CACHE_SUFFIXES = (".lcf", ".cache")
FFL_SUFFIXES = (".ffl",)
DATAFIND_TIMEOUT_SECONDS = 30.0
"""Timeout of each request to a datafind server."""
_NAME = re.compile(
    r"(?P<obs>[^-]+)-(?P<desc>.+)-(?P<gps>\d+(?:\.\d*)?)-(?P<dur>\d+(?:\.\d*)?)\.gwf"
)


@dataclass(frozen=True)
class FrameFile:
    """One GWF file and the GPS interval its name (or cache entry) says it covers."""

    observatory: str
    description: str
    gps_start: float
    duration: float
    path: Path
    listed_by_datafind: bool = field(default=False, compare=False)
    """Whether a datafind server listed it (``datafind_frames``): only the advice of
    ``frame_types.overlap_problems`` depends on it."""

    @property
    def gps_end(self) -> float:
        """GPS end of the file (exclusive)."""
        return self.gps_start + self.duration

    def overlaps(self, gps_start: float, gps_end: float) -> bool:
        """Whether the file covers more than round-off of ``[gps_start, gps_end)``."""
        return (self.gps_end > gps_start + GPS_TOLERANCE_SECONDS
                and self.gps_start < gps_end - GPS_TOLERANCE_SECONDS)


# ---- discovery -------------------------------------------------------------------------------


def parse_frame_name(path: Path) -> FrameFile | None:
    """``FrameFile`` from a name ``<OBS>-<DESC>-<GPS>-<DUR>.gwf``, or None if it does not fit."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return None
    return FrameFile(match["obs"], match["desc"], float(match["gps"]), float(match["dur"]), path)


def find_frames(source: Path | str) -> list[FrameFile]:
    """The frame files of a directory (recursive), a LAL cache, an FFL file or one ``.gwf``.

    Parameters
    ----------
    source
        A directory searched for ``*.gwf``; a LAL cache (``.lcf``/``.cache``, lines
        ``OBS DESC GPS DUR URL``); an FFL file (``.ffl``, lines ``PATH GPS DUR 0 0``); or a
        single ``.gwf`` file.

    Returns
    -------
    list of FrameFile
        Sorted by (observatory, gps_start).

    Raises
    ------
    DataError
        If the source does not exist, lists no frame files or has a malformed line. (Listed
        files that do not exist are reported by ``preflight``.)
    """
    source = Path(source)
    if not source.exists():
        raise DataError(f"frame source {source} does not exist")
    if source.is_dir():
        frames, dangling = [], []
        for path in _gwf_paths_under(source):
            if path.name.startswith("."):
                continue
            if path.is_symlink() and not path.exists():
                dangling.append(path)
                continue
            # a directory so named is no gap either: named. A FIFO or a device is listed: the
            # frame reader names it without opening it (errors.not_a_regular_file), check
            # refuses it as a cache's, and a client that meets it after make-dag takes it
            # as a bad file (data.on_bad_file): before, its client failed, even with "gap"
            if path.is_dir():
                raise DataError(f"frame file {path} is a directory, not a frame file's data")
            frame = parse_frame_name(path.resolve())
            if frame is None:
                raise DataError(
                    f"frame file {path} is not named <OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
                )
            frames.append(frame)
        if dangling:  # not a gap in the data: a link whose target has gone
            raise DataError(_dangling_links_text(dangling))
        if not frames:
            raise DataError(f"no .gwf frame files under {source}")
    elif source.suffix in CACHE_SUFFIXES:
        frames = _read_lal_cache(source)
    elif source.suffix in FFL_SUFFIXES:
        frames = _read_ffl(source)
    elif source.suffix == ".gwf":
        frame = parse_frame_name(source.resolve())
        if frame is None:
            raise DataError(
                f"frame file {source} is not named <OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
            )
        frames = [frame]
    else:
        raise DataError(
            f"frame source {source} is neither a directory nor a .lcf/.cache/.ffl/.gwf file"
        )
    return _listing(frames)


def _listing(frames: Iterable[FrameFile]) -> list[FrameFile]:
    """The frame files, each path once, sorted by (observatory, gps_start, path). A path that
    is not UTF-8 is listed too: only a file the campaign reads is refused for it
    (``path_problem``)."""
    unique = {f.path: f for f in frames}
    return sorted(unique.values(), key=lambda f: (f.observatory, f.gps_start, str(f.path)))


def printable(name: str | Path) -> str:
    """A path or name as a message shows it: bytes that are not UTF-8 (a file named on
    another system) as ``\\xff`` escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def path_problem(frame: FrameFile) -> str | None:
    """Why LALFrame cannot open the file by its path (it takes a path as a C string of UTF-8
    and refuses any other, as if the file were unreadable), or None. Asked of the files a
    campaign reads only (``preflight``, the reader), so an odd name elsewhere in a tree or a
    datafind answer blocks nothing."""
    try:
        str(frame.path).encode("utf-8")
    except UnicodeEncodeError:
        return (f"frame file {printable(frame.path)}: its path is not valid UTF-8, and "
                "LALFrame cannot open such a path; rename it")
    return None


def _dangling_links_text(links: list[Path]) -> str:
    """The message for frame files that are symbolic links to nothing (a moved or unmounted
    store): each link and its target."""
    named = [f"{link} -> {os.readlink(link)}" for link in links]
    what = ("frame file is a symbolic link to a file that does not exist" if len(links) == 1
            else f"{len(links)} frame files are symbolic links to files that do not exist")
    return f"{what}: {names_text(named, shown=3)}"


def _gwf_paths_under(directory: Path) -> list[Path]:
    """Every ``*.gwf`` path under ``directory`` (symbolic links followed, as ``rglob`` does;
    directories so named too), sorted. A directory that cannot be listed is a DataError
    naming it: ``rglob`` passes over it in silence, and its frames would then be reported
    missing rather than unreadable."""

    def refuse(err: OSError) -> None:
        raise DataError(f"cannot list frame directory {err.filename}: {err.strerror}")

    return sorted(Path(root) / name  # a directory so named too: the caller names it
                  for root, dirs, names in os.walk(directory, onerror=refuse, followlinks=True)
                  for name in (*names, *dirs) if name.endswith(".gwf"))


def _read_lines(source: Path) -> list[tuple[int, list[str]]]:
    try:
        text = read_text(source, limit_bytes=None)  # grows with the campaign; a FIFO refused
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        raise DataError(f"cannot read frame cache {source}: {err}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((number, line.split()))
    if not out:
        raise DataError(f"frame cache {source} lists no frame files")
    return out


def _local_path(entry: str, source: Path, number: int) -> Path:
    if "://" in entry:
        url = urlparse(entry)
        if url.scheme != "file" or url.netloc not in ("", "localhost"):
            raise DataError(f"{source}, line {number}: {entry!r} is not a local file:// URL")
        path = Path(unquote(url.path, errors="surrogateescape"))  # the bytes escaped
    else:
        path = Path(entry)
    if not path.is_absolute():
        path = source.parent / path
    return path.resolve()  # whether it exists is checked by ``preflight``, with the rest


def _number(text: str, source: Path, number: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{source}, line {number}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or (what == "duration" and value <= 0):
        raise DataError(f"{source}, line {number}: invalid {what} {text!r}")
    return value


def _read_lal_cache(source: Path) -> list[FrameFile]:
    frames = []
    for number, fields in _read_lines(source):
        if len(fields) != 5:
            raise DataError(
                f"{source}, line {number}: malformed LAL cache line (expected "
                f"'OBS DESC GPSSTART DURATION URL', got {len(fields)} fields)"
            )
        obs, desc, gps, dur, url = fields
        frames.append(
            FrameFile(
                obs,
                desc,
                _number(gps, source, number, "GPS start"),
                _number(dur, source, number, "duration"),
                _local_path(url, source, number),
            )
        )
    return frames


def lal_cache_text(entries: Iterable[tuple[str, str, float, float, Path | str]]) -> str:
    """A LAL cache of ``entries`` (observatory, description, GPS start, seconds, local path),
    in their order: lines ``OBS DESC GPS DUR file://localhost<path>``, the numbers as given
    (``find_frames`` reads it)."""
    return "".join(f"{obs} {desc} {gps} {seconds} file://localhost{path}\n"
                   for obs, desc, gps, seconds, path in entries)


def _read_ffl(source: Path) -> list[FrameFile]:
    frames = []
    for number, fields in _read_lines(source):
        if len(fields) not in (3, 5):
            raise DataError(
                f"{source}, line {number}: malformed FFL line (expected "
                f"'PATH GPSSTART DURATION 0 0', got {len(fields)} fields)"
            )
        path = _local_path(fields[0], source, number)
        named = parse_frame_name(path)
        if named is None:
            raise DataError(
                f"{source}, line {number}: frame file {path} is not named "
                "<OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf (needed for its observatory)"
            )
        frames.append(
            FrameFile(
                named.observatory,
                named.description,
                _number(fields[1], source, number, "GPS start"),
                _number(fields[2], source, number, "duration"),
                path,
            )
        )
    return frames


# ---- datafind --------------------------------------------------------------------------------


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def datafind_frames(
    server_url: str,
    frametypes: Sequence[str],
    gps_start: float,
    gps_end: float,
    timeout_seconds: float = DATAFIND_TIMEOUT_SECONDS,
) -> list[FrameFile]:
    """The frame files a gwdatafind server lists for ``frametypes`` over a GPS range.

    For each frame type the observatory asked for is its first letter (``H1_HOFT_C00`` ->
    ``H``); ``gwdatafind.find_urls`` is asked for ``[floor(gps_start), ceil(gps_end))``
    (gaps are ignored here: ``preflight`` reports them). Only ``file://`` URLs of files named
    ``<OBS>-<DESC>-<GPS>-<DUR>.gwf`` are accepted; whether the files exist is checked by
    ``preflight``.

    Raises
    ------
    DataError
        Naming the server URL when it cannot be reached or answers with an error, and the
        frame type and GPS range when it lists no files (with the types it knows).
    """
    import gwdatafind
    import requests

    lo, hi = math.floor(gps_start), math.ceil(gps_end)
    frames: list[FrameFile] = []
    for frametype in frametypes:
        observatory = frametype[:1]
        what = f"frame type {frametype} (observatory {observatory}) for {gps_range_text(lo, hi)}"
        try:
            with warnings.catch_warnings():
                # igwn-auth-utils warns that X.509 identities are deprecated on every call
                warnings.simplefilter("ignore", DeprecationWarning)
                urls = gwdatafind.find_urls(
                    observatory,
                    frametype,
                    lo,
                    hi,
                    host=server_url,
                    urltype="file",
                    on_gaps="ignore",
                    timeout=timeout_seconds,
                )
        except (requests.RequestException, OSError, ValueError, RuntimeError) as err:
            raise DataError(
                f"datafind server {server_url} failed to list {what}: {first_line(err)}"
            ) from None
        if not urls:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    known = gwdatafind.find_types(
                        observatory, host=server_url, timeout=timeout_seconds
                    )
                types = names_text(sorted(known), shown=20) or "none"
                hint = f"; frame types it has for {observatory}: {types}"
            except (requests.RequestException, OSError, ValueError, RuntimeError):
                hint = ""
            raise DataError(f"datafind server {server_url} lists no files of {what}{hint}")
        for url in urls:
            parsed = urlparse(url)
            if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
                raise DataError(
                    f"datafind server {server_url} returned {url!r} for {what}: not a local "
                    "file:// URL"
                )
            path = Path(unquote(parsed.path, errors="surrogateescape"))
            frame = parse_frame_name(path)
            if frame is None:
                raise DataError(
                    f"datafind server {server_url} returned {path} for {what}: not named "
                    "<OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
                )
            frames.append(replace(frame, listed_by_datafind=True))
    return _listing(frames)


def discover_frames(data: DataConfig) -> list[FrameFile]:
    """The campaign's frame files: from ``data.frames`` or from ``data.datafind_server``.

    ``data.frames`` is a directory, LAL cache or FFL file (``find_frames``); otherwise the
    datafind server is asked for each of ``data.frametypes`` over the span
    (``datafind_frames``). With both, ``data.frametypes`` chooses among ``data.frames``' files
    by their frame type (the description in their names): a type it names with no file there
    is an error. Files that hold one channel over one time are reported by ``preflight`` and
    refused by the reader (``frame_types.overlap_problems``).
    """
    if data.frames is not None:
        found = find_frames(data.frames)
        if not data.frametypes:
            return found
        chosen = [f for f in found if f.description in data.frametypes]
        present = {f.description for f in chosen}
        absent = [kind for kind in data.frametypes if kind not in present]
        if absent:
            raise DataError(f"data.frametypes: no frame file of type {absent[0]!r} in "
                            f"{data.frames} (frame types there: "
                            f"{names_text(sorted({f.description for f in found}))})")
        return chosen
    return datafind_frames(
        data.datafind_server, data.frametypes, data.start, data.start + data.duration
    )


def frame_source(data: DataConfig) -> str:
    """Where the campaign's frames come from, for messages."""
    if data.frames is not None:
        return str(data.frames) + (f" ({', '.join(data.frametypes)})" if data.frametypes else "")
    return f"datafind server {data.datafind_server} ({', '.join(data.frametypes)})"


# ---- what the files cover and hold -----------------------------------------------------


def time_order(f: FrameFile) -> tuple[float, float, str]:
    """How frame files are ordered in time: start, end, path."""
    return f.gps_start, f.gps_end, str(f.path)


class FilesInTime:
    """Frame files in time order (``files``), and those overlapping a GPS interval found by
    bisection on their starts (a year of reads or science segments against a year of files:
    each interval looks only at the files that can reach it, not at every file)."""

    def __init__(self, frames: Iterable[FrameFile]) -> None:
        self.files = sorted(frames, key=time_order)
        self._starts = [f.gps_start for f in self.files]
        self._longest = max((f.duration for f in self.files), default=0.0)

    def overlapping(self, gps_start: float, gps_end: float) -> list[FrameFile]:
        """The files that overlap ``[gps_start, gps_end)`` (``FrameFile.overlaps``), in time
        order."""
        first = bisect.bisect_left(self._starts,
                                   gps_start - self._longest - GPS_TOLERANCE_SECONDS)
        last = bisect.bisect_left(self._starts, gps_end)
        return [f for f in self.files[first:last] if f.overlaps(gps_start, gps_end)]


def files_per_interval(frames: Sequence[FrameFile], needed: Sequence[tuple[float, float]]
                       ) -> list[list[FrameFile]]:
    """For each of the ``needed`` GPS intervals, the ``frames`` that overlap it, in time
    order (``FilesInTime``)."""
    index = FilesInTime(frames)
    return [index.overlapping(gps_start, gps_end) for gps_start, gps_end in needed]


def coverage_holes(
    files: Sequence[FrameFile], needed: Iterable[tuple[float, float]], observatory: str
) -> list[tuple[float, float, str]]:
    """The parts of the ``needed`` GPS intervals that ``files`` (of one observatory) do not
    cover, each as ``(gps_start, gps_end, where)``: ``where`` names the files either side."""
    covered = gps_segments((f.gps_start, f.gps_end) for f in files)
    holes = gps_segments(gps_segments(needed) - covered)
    return [(a, b, _hole_context(files, a, b, observatory)) for a, b in holes]


def _hole_context(files: Sequence[FrameFile], a: float, b: float, observatory: str) -> str:
    before = [f for f in files if f.gps_end <= a + GPS_TOLERANCE_SECONDS]
    after = [f for f in files if f.gps_start >= b - GPS_TOLERANCE_SECONDS]
    prev = max(before, key=lambda f: f.gps_end, default=None)
    nxt = min(after, key=lambda f: f.gps_start, default=None)
    if prev and nxt:
        return f"between {prev.path.name} and {nxt.path.name}"
    if nxt:
        return f"before {nxt.path.name}, the first file"
    if prev:
        return f"after {prev.path.name}, the last file"
    return f"no frame files of observatory {observatory!r}"


def rate_factor(rate: float, sample_rate: float) -> int | None:
    """``rate / sample_rate`` if it is a whole number >= 1, else None."""
    ratio = rate / sample_rate
    factor = int(round(ratio))
    if factor < 1 or abs(ratio - factor) > 1e-9 * max(1.0, ratio):
        return None
    return factor
