"""GWF files read in a child process, so that a crash of the frame library is an error.

LALFrame, which gwpy reads GWF files with, can crash the interpreter on a truncated or corrupt
file (a partial copy on a shared disk, a CVMFS hiccup): SIGSEGV, and the node's log says
nothing. Every read of frame data (``frames.read_span``) and every probe of a file
(``preflight``) therefore runs in a reader process, started on first use and reused: it
reads with LALFrame and sends the samples back over a pipe. When it dies, the files of the
request that killed it are read again one by one, each in a fresh reader, and the one that
crashes it is named in a ``BadFrameFile`` (a ``DataError``: exit code 3). A reader that does
not answer within ``READ_TIMEOUT_SECONDS`` is killed, and its request fails the same way.

Each file is read on its own, over the part of the request its name says it covers, after
its frames' span (its table of contents) is compared with its name's: a file that lies about
its span (named 32 s, holding 16 s; or holding data 8 s earlier) is refused by name, instead
of being joined to its neighbours out of place.

The reader calls LALFrame itself, as gwpy's own LALFrame reader does (each channel read at its
type; the end re-read where LALFrame stops one sample short, lalsuite issue 710), rather than
through gwpy: importing gwpy loads matplotlib, scipy.signal and astropy, 1.5 CPU seconds that
every client job's reader would pay, where LALFrame loads in 0.1 s.

The same process opens the HDF5 files users bring (``GwfReader.call``: injection sets,
response sets, aframe's rejected draws) and the report's probe of the campaign's output, where
a byte flipped in a few places crashes the HDF5 library (SIGSEGV) or makes it loop for ever:
that too is an error naming the file.

The reader's stdout carries the replies; what the frame library prints is dropped (the error
raised here names the file and the reason).
"""

from __future__ import annotations

import atexit
import importlib
import math
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.errors import DataError, names_text, not_a_regular_file
from offline_iaas.gps import gps_range_text, gps_span_text, gps_text

READ_TIMEOUT_SECONDS = 600.0
"""A reader that answers no request within this is killed (a hung network filesystem)."""
PROBE_TIMEOUT_SECONDS = 120.0
"""A probe of one file that takes longer (a hung filesystem) kills the reader and fails the
file (``preflight``; what a frame type holds, ``frames``)."""
ALARM_MARGIN_SECONDS = 5
"""A reader still on a request this long after the asking side's time ends itself."""
SPAN_TOLERANCE_SECONDS = 1e-6
_HEADER = struct.Struct("!Q")


class BadFrameFile(DataError):
    """A frame file the frame library cannot read (it crashed, hung, or the file lies about
    its span): ``path`` and the GPS span its name says it covers."""

    def __init__(self, message: str, path: Path, gps_start: float, gps_end: float) -> None:
        super().__init__(message)
        self.path = Path(path)
        self.gps_start = gps_start
        self.gps_end = gps_end


@dataclass(frozen=True)
class FileRead:
    """One file of a read: its path, the GPS span its name says it covers, and the part of
    the request inside that span."""

    path: str
    gps_start: float
    gps_end: float
    read_start: float
    read_end: float


Series = tuple[float, float, np.ndarray]
"""``(t0, sample_rate, samples)`` of one channel: float64 samples from GPS ``t0``."""


# ---- the reader process (what runs in the child) --------------------------------------------


def table_of_contents(path: str) -> tuple[list[str], tuple[float, float]]:
    """Every channel a GWF file's table of contents lists (simulated, processed and ADC), and
    its frames' GPS span: the first frame's start to the last frame's end."""
    import lalframe

    try:
        frame_file = lalframe.FrameUFrFileOpen(path, "r")  # held: the contents point into it
    except RuntimeError as err:
        if str(err) != "I/O error":
            raise
        raise OSError(f"failed to open '{path}'") from None  # gwpy's words, as before
    contents = lalframe.FrameUFrTOCRead(frame_file)
    names = [getattr(lalframe, f"FrameUFrTOCQuery{kind}Name")(contents, index)
             for kind in ("Sim", "Proc", "Adc")
             for index in range(getattr(lalframe, f"FrameUFrTOCQuery{kind}N")(contents))]
    last = lalframe.FrameUFrTOCQueryNFrame(contents) - 1
    first_start = sum(lalframe.FrameUFrTOCQueryGTimeModf(contents, 0))
    last_start = sum(lalframe.FrameUFrTOCQueryGTimeModf(contents, last))
    span = (first_start, last_start + lalframe.FrameUFrTOCQueryDt(contents, last))
    del contents, frame_file  # the contents first
    return names, span


def read_channels(path: str, names: Sequence[str], gps_start: float, gps_end: float,
                  frames: tuple[float, float]) -> dict[str, Series]:
    """``names`` from one GWF file over ``[gps_start, gps_end)``, clipped to ``frames`` (its
    frames' span, from ``table_of_contents``): each channel's samples from the first at or after
    ``gps_start``, as float64."""
    import lal
    import lalframe

    type_names = {lal.S_TYPE_CODE: "REAL4", lal.D_TYPE_CODE: "REAL8", lal.I2_TYPE_CODE: "INT2",
                  lal.I4_TYPE_CODE: "INT4", lal.I8_TYPE_CODE: "INT8", lal.U2_TYPE_CODE: "UINT2",
                  lal.U4_TYPE_CODE: "UINT4", lal.U8_TYPE_CODE: "UINT8",
                  lal.C_TYPE_CODE: "COMPLEX8", lal.Z_TYPE_CODE: "COMPLEX16"}
    gps_start, gps_end = max(frames[0], gps_start), min(frames[1], gps_end)
    if gps_end <= gps_start:
        raise ValueError(f"no data in GPS {gps_span_text(gps_start, gps_end)}")
    stream = lalframe.FrStreamOpen(*os.path.split(os.path.abspath(path)))
    start, end = lal.LIGOTimeGPS(gps_start), lal.LIGOTimeGPS(gps_end)
    out: dict[str, Series] = {}
    for name in names:
        lalframe.FrStreamSeek(stream, start)
        kind = type_names[lalframe.FrStreamGetTimeSeriesType(name, stream)]
        read = getattr(lalframe, f"FrStreamRead{kind}TimeSeries")
        series = read(stream, name, start, float(end - start), 0)
        t0, step, parts = float(series.epoch), series.deltaT, [series.data.data]
        # LALFrame may stop one sample short (lalsuite issue 710): read the rest. GPS times
        # as LIGOTimeGPS (nanoseconds): a float of ~1e9 s is 2e-7 s coarse
        read_to = series.epoch + len(series.data.data) * step
        if float(end - read_to) >= step:
            lalframe.FrStreamSeek(stream, read_to)
            parts.append(read(stream, name, read_to, float(end - read_to), 0).data.data)
        out[name] = (t0, 1.0 / step, np.concatenate(parts).astype(np.float64))
    return out


def span_lie(frames: tuple[float, float], named: tuple[float, float]) -> str:
    """Why a file's frames' span (from ``table_of_contents``) is not what its name says (``its name
    says ...``), or ''."""
    first, end = frames
    if abs(first - named[0]) <= SPAN_TOLERANCE_SECONDS and \
            abs(end - named[1]) <= SPAN_TOLERANCE_SECONDS:
        return ""
    return (f"its name says GPS {gps_span_text(named[0], named[1])}, its frames hold GPS "
            f"{gps_span_text(first, end)} (a file that lies about its span)")


def read_files(items: Sequence[FileRead], names: Sequence[str]) -> dict[str, Series]:
    """Read ``names`` from each file over its part of the request and join them (in the
    reader process; also callable in-process by tests).

    Raises
    ------
    BadFrameFile
        A file whose samples are not where its name says.
    DataError
        A channel missing from a file, or held at another rate than in the files before.
    """
    joined: dict[str, list[np.ndarray]] = {name: [] for name in names}
    first: dict[str, tuple[float, float]] = {}
    held: dict[str, str] = {}  # the file ``first`` came from
    for item in items:
        listed, frames = table_of_contents(item.path)  # LALFrame crashes on a truncated file
        lie = span_lie(frames, (item.gps_start, item.gps_end))
        if lie:
            raise BadFrameFile(f"frame file {item.path}: {lie}", Path(item.path),
                               item.gps_start, item.gps_end)
        missing = [n for n in names if n not in listed]
        if missing:
            raise DataError(f"channel {missing[0]} not found in {item.path} (needed for GPS "
                            f"{gps_range_text(item.read_start, item.read_end)})")
        # LALFrame returns the samples at or after `start`: a little margin on both sides
        eps = SPAN_TOLERANCE_SECONDS
        data = read_channels(item.path, names, item.read_start - eps, item.read_end + eps,
                             frames)
        for name in names:
            t0, rate, samples = data[name]
            first.setdefault(name, (t0, rate))
            held.setdefault(name, item.path)
            if rate != first[name][1]:  # joined, the samples would not be where they seem
                raise DataError(f"channel {name} in {item.path} has sample rate {rate:g} Hz, "
                                f"in {held[name]} {first[name][1]:g} Hz: one channel's files "
                                "must share one rate")
            joined[name].append(samples)
    return {name: (*first[name], np.concatenate(joined[name])) for name in names}


def probe_file(path: str, wanted: Sequence[str], gps_start: float, seconds: float | None,
               span: tuple[float, float]) -> dict[str, Any]:
    """Which of ``wanted`` a file's table of contents lists (``names``; a raw frame lists
    some 10**5 channels, which stay here: ``listing`` is the first few, for messages), their
    rates from a read of ``seconds`` (none for None), and its frames' GPS span (first frame's
    start to last frame's end) against ``span``, its name's."""
    names, frames = table_of_contents(path)
    lie = span_lie(frames, span)
    if lie:
        raise ValueError(lie)
    listed = set(names)
    present = [n for n in wanted if n in listed]
    rates: dict[str, float] = {}
    if present and seconds is not None:
        data = read_channels(path, present, gps_start, gps_start + seconds, frames)
        for name in present:
            t0, rate, samples = data[name]
            if len(samples) == 0:
                raise ValueError(f"channel {name}: no samples at GPS {gps_text(gps_start)}")
            finite = np.isfinite(samples)
            if not finite.all():
                index = int(np.argmin(finite))
                raise ValueError(f"channel {name}: non-finite sample ({samples[index]}) "
                                 f"at GPS {gps_text(t0 + index / rate)}")
            rates[name] = rate
    return {"names": present, "listing": names_text(names, shown=20), "rates": rates}


def _send(stream, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the reader's pipe closed")
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the reader's pipe closed mid-reply")
    return pickle.loads(data)


def _serve() -> None:
    """The reader process: answer requests from stdin on the original stdout, until EOF."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the frame library prints goes to stderr, not into the replies
    parent = os.getppid()

    def orphaned() -> None:  # the asking process died (SIGKILL): do not outlive it
        while True:
            threading.Event().wait(5.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    requests = sys.stdin.buffer
    while True:
        try:
            kind, args, seconds = _receive(requests)
        except EOFError:
            return
        # killed by the kernel (SIGALRM's default action) if the request outlives the asking
        # side's time: a library looping in C holds the GIL, so that neither the orphan
        # watch above nor any Python handler runs, and the asking side may be gone
        signal.alarm(math.ceil(seconds) + ALARM_MARGIN_SECONDS)
        try:
            if kind == "read":
                reply = ("ok", read_files(*args))
            elif kind == "call":  # GwfReader.call
                module, name = args[0].split(":")
                reply = ("ok", getattr(importlib.import_module(module), name)(Path(args[1])))
            elif kind == "load":  # the frame library, before any file is read
                import lalframe  # noqa: F401

                reply = ("ok", None)
            else:
                reply = ("ok", probe_file(*args))
        except BadFrameFile as err:
            reply = ("bad", str(err), str(err.path), err.gps_start, err.gps_end)
        except DataError as err:
            reply = ("data", str(err))
        except Exception as err:  # every other reader error goes back as its first line
            text = str(err).strip()
            reply = ("other", text.splitlines()[0] if text else type(err).__name__)
        _send(replies, reply)
        signal.alarm(0)


# ---- the asking side ------------------------------------------------------------------------


class _ReaderDied(Exception):
    """The reader process died (or was killed after hanging) on a request: ``cause`` says how
    (``crashed (SIGSEGV)``, ``hung (killed after 600 s)``, ``exited with code 1``)."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class GwfReader:
    """One reader process, started on first use and restarted after it dies."""

    def __init__(self, timeout_seconds: float = READ_TIMEOUT_SECONDS) -> None:
        self.timeout_seconds = timeout_seconds
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            # LALFrame's own complaints (XLAL Error ...) are not shown: the error this side
            # raises names the file and the reason
            self._proc = subprocess.Popen(
                [sys.executable, "-c",
                 "from offline_iaas.data.gwf_reader import _serve; _serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self._proc

    def _ask(self, kind: str, args: tuple, timeout_seconds: float | None = None) -> Any:
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        proc = self._start()
        answer: list[Any] = []

        def exchange() -> None:
            try:
                _send(proc.stdin, (kind, args, timeout))
                answer.append(_receive(proc.stdout))
            except (OSError, EOFError, pickle.UnpicklingError):
                pass

        worker = threading.Thread(target=exchange, daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive() or not answer:
            hung = worker.is_alive()
            self._kill()
            code = proc.returncode
            if hung:
                cause = f"hung (killed after {timeout:g} s)"
                raise _ReaderDied(f"the frame reader {cause}", cause)
            why = (f"crashed ({signal.Signals(-code).name})" if code is not None and code < 0
                   else f"exited with code {code}")
            raise _ReaderDied(f"the frame library {why}", why)
        return answer[0]

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    @property
    def pid(self) -> int | None:
        """The reader process's PID; None before it starts and once this side has stopped it."""
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """Stop the reader process (it also stops by itself when this process ends)."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    def read(self, items: Sequence[FileRead], names: Sequence[str]) -> dict[str, Series]:
        """``read_files`` in the reader process.

        Raises
        ------
        BadFrameFile
            A file the frame library crashes or hangs on, or that lies about its span; one
            that is no regular file, or none there (``errors.not_a_regular_file``), never
            opened: LALFrame's open of a FIFO waits for a writer for ever.
        DataError
            A missing channel or another reader error, naming the files.
        """
        for item in items:
            if (problem := not_a_regular_file(Path(item.path))) is not None:  # never opened
                raise BadFrameFile(f"frame file {item.path} {problem}", Path(item.path),
                                   item.gps_start, item.gps_end)
        with self._lock:
            try:
                reply = self._ask("read", (list(items), list(names)))
            except _ReaderDied as err:
                raise self._culprit(items, names, str(err)) from None
            if reply[0] == "ok":
                return reply[1]
            if reply[0] == "other":  # the frame library refused a file: which one?
                raise self._culprit(items, names, reply[1])
            raise _error(reply)

    def _culprit(self, items: Sequence[FileRead], names: Sequence[str], why: str
                 ) -> DataError:
        """The error for a request of several files that failed: each file alone (in a fresh
        reader when the last one died); the first that fails again is the bad file."""
        for item in items:
            try:
                reply = self._ask("read", ([item], list(names)))
            except _ReaderDied as err:
                reply = ("other", f"{err} reading it (truncated or corrupt?)")
            else:
                if reply[0] == "other":
                    reply = ("other", f"the frame library cannot read it ({reply[1]}): "
                                      "truncated or corrupt?")
            if reply[0] == "other":
                return BadFrameFile(f"frame file {item.path}: {reply[1]}", Path(item.path),
                                    item.gps_start, item.gps_end)
            if reply[0] != "ok":
                return _error(reply)
        paths = ", ".join(i.path for i in items)
        return DataError(f"{why} reading {paths} together (each file alone reads)")

    def start(self) -> None:
        """Start the reader process now, with the frame library loaded (a merge measures this
        fixed cost apart from its reading)."""
        with self._lock:
            self._ask("load", ())

    def probe(self, path: str, wanted: Sequence[str], gps_start: float, seconds: float | None,
              span: tuple[float, float], timeout_seconds: float | None = None
              ) -> dict[str, Any]:
        """``probe_file`` in the reader process; ``{"error": message}`` when it fails (a file
        that is no regular file, or none there, never opened: ``errors.not_a_regular_file``)."""
        if (problem := not_a_regular_file(Path(path))) is not None:
            return {"error": f"the file {problem}"}
        with self._lock:
            try:
                reply = self._ask("probe", (path, list(wanted), gps_start, seconds, span),
                                  timeout_seconds)
            except _ReaderDied as err:
                return {"error": f"{err} reading it (truncated or corrupt?)"}
        return reply[1] if reply[0] == "ok" else {"error": reply[1]}

    def call(self, function: Callable[[Path], Any], path: Path, library: str = "HDF5",
             timeout_seconds: float | None = None) -> Any:
        """``function(path)`` in the reader process (a module-level function whose result
        pickles): how the HDF5 files users bring are opened (injection sets, response sets,
        aframe's rejected draws), the report's output and ``inspect``'s products probed, so
        that a byte flipped where it crashes or hangs the HDF5 library (or LALFrame:
        ``library`` ``"GWF"``) is an error naming the file too, not a dead or hung command
        (hung: no answer within ``timeout_seconds``, by default the reader's).

        Raises
        ------
        DataError
            ``function``'s; or ``<path>: not a readable HDF5 file: the HDF5 library crashed
            (SIGSEGV) reading it`` (or ``hung (killed after T s)``; a GWF file's: LALFrame).
        """
        target = f"{function.__module__}:{function.__qualname__}"
        with self._lock:
            try:
                reply = self._ask("call", (target, str(path)), timeout_seconds)
            except _ReaderDied as err:
                named = "LALFrame" if library == "GWF" else f"the {library} library"
                raise DataError(f"{path}: not a readable {library} file: {named} "
                                f"{err.cause} reading it") from None
        if reply[0] == "other":  # not the file's damage (which the readers name): a bug
            raise RuntimeError(f"{target}({path}) in the reader process: {reply[1]}")
        if reply[0] != "ok":
            raise _error(reply)
        return reply[1]


def _error(reply: tuple) -> DataError:
    """The error of a reader's ``bad`` or ``data`` reply."""
    if reply[0] == "bad":
        return BadFrameFile(reply[1], Path(reply[2]), reply[3], reply[4])
    return DataError(reply[1])  # its message names the file


_READER: GwfReader | None = None


def reader() -> GwfReader:
    """This process's frame reader."""
    global _READER
    if _READER is None:
        _READER = GwfReader()
        atexit.register(_READER.close)
    return _READER
