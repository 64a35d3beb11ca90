"""The rules of each section's own values, one step each (``config_checks.check_config`` runs
them in order, after the sign rules of ``config_numbers``): ``[data]`` and its channels,
``[model]``, ``[layout]``, ``[server]`` with ``[site]`` (runtime, sizes, bind address,
profile), ``[merge]``, and ``[synth]``'s population. And the forms of the strings a section
holds: a job's size (``size_megabytes``), the server's bind address
(``bind_problem``), a gwdatafind server (``datafind_problem``), a channel name
(``channel_problem``).

Each failure is ``fail(key, why)``: one ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from offline_iaas.config_numbers import off_grid
from offline_iaas.config_sections import (
    DataConfig,
    MergeConfig,
    ServerConfig,
    SiteConfig,
    SynthConfig,
)
from offline_iaas.manifest import MANIFEST_FILE

if TYPE_CHECKING:
    from offline_iaas.config import CampaignConfig

Fail = typing.Callable[[str, str], None]
"""``fail(key, why)``: raises the ConfigError naming the config file and ``key``."""

SITE_PROFILES: tuple[str, ...] = ("local", "ldg", "osg", "hepcloud")
SERVER_RUNTIMES: tuple[str, ...] = ("native", "apptainer", "singularity")
BAD_FILE_CHOICES: tuple[str, ...] = ("fail", "gap")
"""``data.on_bad_file``: stop at a bad frame file, or make its span a gap."""
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
"""``model.name``: the served model's directory in the repository and its name in Triton's
URLs (``/v2/models/<name>``); not hidden, no path, no option, at most a file name's 255."""
GPS_END = 1e10
"""GPS seconds of the year 2296: later starts are typos (frame names hold 10 digits)."""
SAMPLE_RATES_HZ = (16.0, 65536.0)
"""``data.sample_rate`` and ``synth.frame_sample_rate``: from LIGO's slowest recorded channels
to its fastest; beyond, a typo's exponent (a stride or file of no sample, a file of 1e300)."""
F_LOWER_MIN_HZ = 1.0
"""``synth.f_lower_hz`` floor: below the seismic wall of any ground-based detector, and a
waveform from lower lasts days (from 0, forever: lalsimulation crashed)."""
MAX_SYNTH_WITNESSES = 1000
"""``synth.witnesses`` bound: more than any DeepClean takes (O3's took 21 to a few hundred);
each witness costs 0.5 MB per interferometer in every block synth generates (100,000 of them
ran a 24 GiB machine out of memory)."""
REDSHIFTS = (1e-3, 20.0)
"""``synth.redshift_max``: from 4 Mpc (a nearer population is no population) to before the
first stars (Planck18's distance and volume crashed at 1e300)."""

SIZE = re.compile(r"(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>[KMGT])B?", re.IGNORECASE)
"""A job's memory or disk as HTCondor's ``request_memory``/``request_disk`` take it: a number
and its unit (``4GB``, ``512MB``, ``1.5G``)."""
MEGABYTES_PER_UNIT = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
"""HTCondor's units, powers of 1024."""
LEAST_SIZE_MB = 1.0
"""The least size a job asks for: HTCondor counts memory in whole megabytes, and no job of a
campaign runs in less (``0GB`` passed, a job that asked for nothing)."""
DATAFIND_SCHEMES = ("http", "https")
"""The schemes gwdatafind's client (requests) speaks; a server without one is asked over
``https`` (``http`` on port 80), as ``gwdatafind.find_urls`` does."""
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_SIZE_KEYS = ("server.memory", "server.disk", "site.client_memory", "site.client_disk",
              "site.merge_memory", "site.merge_disk")


def check_data(data: DataConfig, fail: Fail) -> None:
    """``[data]``: the span (start, sample rate, a whole number of samples), where the frames
    come from and what a bad file does."""
    if not data.start < GPS_END:  # a typo's exponent: no frame file holds it
        fail("data.start", f"must be a GPS time in [0, {GPS_END:.0e}) s, got {data.start:g}")
    if not SAMPLE_RATES_HZ[0] <= data.sample_rate <= SAMPLE_RATES_HZ[1]:
        fail("data.sample_rate", f"must be in [{SAMPLE_RATES_HZ[0]:g}, {SAMPLE_RATES_HZ[1]:g}] "
             f"Hz, got {data.sample_rate:g}")
    if off_grid(data.start, data.sample_rate):  # every client failed at its first read
        fail("data.start", f"must be on the data.sample_rate sample grid (a multiple of "
             f"1/{data.sample_rate:g} s after a whole GPS second), got {data.start!r}")
    if (data.frames is None) == (not data.datafind_server):
        fail("data.frames", "or data.datafind_server must be set, and not both")
    if data.datafind_server and (why := datafind_problem(data.datafind_server)) is not None:
        fail("data.datafind_server", f"must be a gwdatafind server, http(s)://HOST[:PORT][/PATH] "
             f"or HOST[:PORT], got {data.datafind_server!r} ({why})")
    if data.on_bad_file not in BAD_FILE_CHOICES:
        fail("data.on_bad_file", f"must be one of {', '.join(map(repr, BAD_FILE_CHOICES))}, "
             f"got {data.on_bad_file!r}")
    if data.datafind_server and not data.frametypes:
        fail("data.frametypes", "must list the frame types to read with data.datafind_server")
    samples = data.duration * data.sample_rate
    if abs(samples - round(samples)) > 1e-6:
        fail("data.duration", f"({data.duration} s) must be a whole number of samples at "
             f"data.sample_rate ({data.sample_rate} Hz)")


def check_channels(data: DataConfig, fail: Fail) -> None:
    """``data.channels`` and ``data.witnesses``: each ``IFO:NAME``, none listed twice, no
    witness a strain channel. A channel is named with its quotes (``repr``): a name with a
    line break or a space stays visible, and the message one line."""
    if not data.channels:
        fail("data.channels", "must name at least one channel")
    for key, channels in (("data.channels", data.channels), ("data.witnesses", data.witnesses)):
        for ch in channels:
            if (why := channel_problem(ch)) is not None:
                fail(key, f"entry {ch!r} {why}")
        if (twice := _listed_twice(channels)) is not None:
            fail(key, f"lists the channel {twice!r} twice")
    strain = [ch for ch in data.witnesses if ch in data.channels]
    if strain:
        fail("data.witnesses", f"lists {strain[0]!r}, a strain channel of data.channels")


def check_model(c: CampaignConfig, fail: Fail) -> None:
    """``[model]``: the served model's name, and its stride and kernel against the data's
    sample rate."""
    model, rate = c.model, c.data.sample_rate
    if not MODEL_NAME.fullmatch(model.name):  # a directory of the model repository
        fail("model.name", "must be a model name Triton takes (letters, digits, '_', '-', '.'; "
             f"not starting with '.' or '-'; at most 255), got {model.name!r}")
    if model.name == MANIFEST_FILE:
        fail("model.name", f"must not be {MANIFEST_FILE!r}: the model repository's manifest "
             "file has that name")
    stride = rate / model.inference_rate
    if abs(stride - round(stride)) > 1e-9:
        fail("model.inference_rate", f"({model.inference_rate} Hz) must divide data.sample_rate "
             f"({rate} Hz) into a whole number of samples")
    if round(stride) < 1:  # 1e12 Hz: a stride of no sample
        fail("model.inference_rate", f"({model.inference_rate:g} Hz) must not exceed "
             f"data.sample_rate ({rate:g} Hz): a stride is at least one sample")
    kernel = model.kernel_seconds * rate
    if abs(kernel - round(kernel)) > 1e-9 or round(kernel) < 1:
        fail("model.kernel_seconds", "must be a positive whole number of samples")
    if c.kernel_samples < c.stride_samples:
        fail("model.kernel_seconds", f"({model.kernel_seconds} s) must not be shorter than the "
             f"stride ({1 / model.inference_rate} s)")


def check_layout(c: CampaignConfig, fail: Fail) -> None:
    """``[layout]``: at least a window for each client share."""
    clients = c.layout.servers * c.layout.clients_per_server
    if c.total_windows < clients:
        fail("data.duration", f"({c.data.duration} s) holds {c.total_windows} windows, fewer "
             f"than the {clients} client shares of the layout")


def check_server_and_site(server: ServerConfig, site: SiteConfig, fail: Fail) -> None:
    """``[server]`` and ``[site]``: the runtime and its image, each job's memory and disk, the
    bind address, the site's profile and filesystem."""
    if server.runtime not in SERVER_RUNTIMES:
        fail("server.runtime", f"must be one of {', '.join(SERVER_RUNTIMES)}, got "
             f"{server.runtime!r}")
    if server.runtime != "native" and not server.image:
        fail("server.image", f"must name the Triton image (server.runtime = {server.runtime!r})")
    sizes = (server.memory, server.disk, site.client_memory, site.client_disk,
             site.merge_memory, site.merge_disk)
    for key, value in zip(_SIZE_KEYS, sizes, strict=True):
        if not SIZE.fullmatch(value):
            fail(key, f"must be a size with its unit (e.g. '4GB', '512MB'), got {value!r}")
        if size_megabytes(value) < LEAST_SIZE_MB:
            fail(key, f"must be at least {LEAST_SIZE_MB:g}MB (no job runs in less), got "
                 f"{value!r}")
    if server.bind and (why := bind_problem(server.bind)) is not None:
        fail("server.bind", f"must be an IPv4 address of the server's machine ('0.0.0.0': all "
             f"of them; empty: the site profile's), got {server.bind!r} ({why})")
    if site.profile not in SITE_PROFILES:
        fail("site.profile", f"must be one of {', '.join(SITE_PROFILES)}, got {site.profile!r}")
    if site.filesystem not in ("", "shared", "transfer"):
        fail("site.filesystem", f"must be 'shared', 'transfer' or '' (the profile's), got "
             f"{site.filesystem!r}")


def check_merge(merge: MergeConfig, fail: Fail) -> None:
    """``[merge]``: a shard of whole seconds, at least one (0: one merge). (``[client]``'s
    and ``[workflow]``'s numbers meet ``config_numbers``' rules alone.)"""
    if 0 < merge.shard_seconds < 1:  # 1e-300: a shard per no time
        fail("merge.shard_seconds", f"must be 0 (one merge) or at least 1 s, got "
             f"{merge.shard_seconds:g}")
    if abs(merge.shard_seconds - round(merge.shard_seconds)) > 1e-9:
        fail("merge.shard_seconds", f"must be a whole number of seconds, got "
             f"{merge.shard_seconds:g}")


def check_population(s: SynthConfig, fail: Fail) -> None:
    """``synth``'s numbers (above Nyquist, ``synth.f_lower_hz`` is refused by ``synth``)."""
    if s.file_duration < 1:
        fail("synth.file_duration", f"must be at least 1 s, got {s.file_duration:g}")
    if not SAMPLE_RATES_HZ[0] <= s.frame_sample_rate <= SAMPLE_RATES_HZ[1]:
        fail("synth.frame_sample_rate", f"must be in [{SAMPLE_RATES_HZ[0]:g}, "
             f"{SAMPLE_RATES_HZ[1]:g}] Hz, got {s.frame_sample_rate:g}")
    if s.witnesses > MAX_SYNTH_WITNESSES:
        fail("synth.witnesses", f"must be at most {MAX_SYNTH_WITNESSES}, got {s.witnesses}")
    witness_rate = s.witness_sample_rate or s.frame_sample_rate
    if s.witnesses and s.line_frequency >= witness_rate / 2:
        fail("synth.line_frequency", f"must be below the witnesses' Nyquist frequency "
             f"({witness_rate / 2:g} Hz), got {s.line_frequency:g}")
    if s.f_lower_hz < F_LOWER_MIN_HZ:
        fail("synth.f_lower_hz", f"must be at least {F_LOWER_MIN_HZ:g} Hz, got {s.f_lower_hz:g}")
    if s.mass_max_msun < s.mass_min_msun:
        fail("synth.mass_max_msun", f"({s.mass_max_msun}) must be at least "
             f"synth.mass_min_msun ({s.mass_min_msun})")
    if not s.spin_max < 1:
        fail("synth.spin_max", f"must be in [0, 1), got {s.spin_max}")
    if not REDSHIFTS[0] <= s.redshift_max <= REDSHIFTS[1]:
        fail("synth.redshift_max", f"must be in [{REDSHIFTS[0]:g}, {REDSHIFTS[1]:g}], got "
             f"{s.redshift_max:g}")


# ---- the forms of a section's strings ------------------------------------------------------


def size_megabytes(text: str) -> float:
    """A size of ``SIZE``'s form (``1.5GB``) in megabytes (1536)."""
    match = SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size with its unit")
    return float(match["number"]) * MEGABYTES_PER_UNIT[match["unit"].upper()]


def bind_problem(address: str) -> str | None:
    """Why tritonserver could not listen on ``address`` (``serve`` passes it as each endpoint's
    ``--*-address``), None if it can: a dotted IPv4 address. Its HTTP and metrics endpoints
    read the address as IPv4 text (libevhtp's ``inet_addr``): a host name listens on
    255.255.255.255, where no client reaches it, and its gRPC endpoint reads ``ADDRESS:PORT``,
    so an IPv6 address (``::1:8001``) is no address there (Triton 2.51: "Socket ... already
    in use"). Whether the machine has the address is ``serve``'s to find."""
    try:
        ipaddress.IPv4Address(address)
        return None
    except ValueError:
        pass
    try:
        ipaddress.IPv6Address(address)
        return "tritonserver's gRPC endpoint takes no IPv6 address"
    except ValueError:
        pass
    if _is_host_name(address):
        return ("a host name: tritonserver's HTTP endpoint takes an address only, and would "
                "listen on 255.255.255.255")
    return "not an address"


def datafind_problem(server: str) -> str | None:
    """Why ``server`` is no gwdatafind server's address (``data.datafind_server``), None if it
    is one: ``http(s)://HOST[:PORT][/PATH]``, or ``HOST[:PORT]`` (gwdatafind adds the scheme).
    HOST is a host name, an IPv4 address or a bracketed IPv6 address."""
    if _has_space_or_control(server):
        return "white space or a control character"
    has_scheme = "://" in server
    if not has_scheme and "/" in server:
        return "a path needs the scheme, http:// or https://"
    try:
        parts = urlsplit(server if has_scheme else f"//{server}")
        port = parts.port
    except ValueError as err:  # a port that is no number, or beyond 65535; a bad bracket
        return str(err)
    if has_scheme and parts.scheme not in DATAFIND_SCHEMES:
        return f"the scheme must be {' or '.join(DATAFIND_SCHEMES)}"
    if parts.query or parts.fragment or parts.username is not None:
        return "no query, fragment or user name"
    host = parts.hostname or ""
    if port == 0 or parts.netloc.endswith(":"):
        return "a port is 1 to 65535"
    if not (_is_host_name(host) or _is_ip_address(host, bracketed="[" in parts.netloc)):
        return f"{host!r} is no host name or address" if host else "no host"
    return None


def channel_problem(channel: str) -> str | None:
    """Why ``channel`` is no channel name (its message's tail), None if it is one:
    ``IFO:NAME``, neither part empty, no white space or control character (frame files'
    channel names have none; ``'H1:STRAIN\\n'`` was read as ``H1:STRAIN`` and then not
    found)."""
    ifo, colon, name = channel.partition(":")
    if not (ifo and colon and name):
        return "is not of the form IFO:NAME"
    if _has_space_or_control(channel):
        return "holds white space or a control character (a channel name has none)"
    return None


def _listed_twice(channels: typing.Sequence[str]) -> str | None:
    """The first channel that ``channels`` lists again, None when each is listed once."""
    seen: set[str] = set()
    for ch in channels:
        if ch in seen:
            return ch
        seen.add(ch)
    return None


def _has_space_or_control(text: str) -> bool:
    """Whether ``text`` holds white space or a control character (no name or address does)."""
    return any(c.isspace() or not c.isprintable() for c in text)


def _is_host_name(text: str) -> bool:
    """Whether ``text`` is a DNS host name (RFC 1123 labels; its last label not all digits,
    so ``999.1.1.1`` is neither an address nor a name)."""
    labels = text.removesuffix(".").split(".")
    return (len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)
            and not labels[-1].isdigit())


def _is_ip_address(text: str, bracketed: bool) -> bool:
    """Whether ``text`` is an IPv4 address, or (``bracketed``, as a URL writes it) IPv6."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return address.version == (6 if bracketed else 4)
