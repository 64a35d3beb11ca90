"""What the search counts of ``search.injections``: the injections and the population they were
drawn from, read through ``search/injection_file.py``'s public readers.

``read_injection_listing`` gives, from one reading of the file, the injections (time, network
SNR, chirp mass, distance) and the population's description (``population.POPULATION_KEYS``):
the file's attributes (``InjectionSet.attrs``, its approximant and ``f_lower``) or
``synth.json``'s ``population`` and ``injection_waveform``. A file that describes no
population (a LIGO_LW table, a JSON list, a foreign HDF5 file) gives ``population = None``:
found fractions, no VT. Every refusal names ``search.injections`` and the file, on one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from offline_iaas.errors import OfflineIaasError
from offline_iaas.physics import Injection
from offline_iaas.search.injection_file import read_injection_listing
from offline_iaas.search.injections_aframe import REJECTED_FILE
from offline_iaas.search.population import COSMOLOGY, POPULATION_KEYS, luminosity_distance_mpc

KEY = "search.injections"


@dataclass(frozen=True)
class InjectionList:
    """``search.injections`` as the search counts it."""

    path: Path
    injections: tuple[Injection, ...]
    population: dict[str, Any] | None
    """``POPULATION_KEYS`` the file says (None for those it does not), with ``listed`` (its
    rows) and ``source`` (its path); None when it describes no population."""


def read_campaign_injections(path: Path) -> InjectionList:
    """Read ``search.injections`` (``path``): its injections and population.

    Raises
    ------
    ConfigError
        The file is missing, not JSON, or its suffix unknown (one line naming it).
    DataError
        It is unreadable (truncated), lacks a column or holds a non-finite value.
    """
    path = Path(path)
    try:
        return _read(path, _version(path), _version(path.with_name(REJECTED_FILE)))
    except OfflineIaasError as err:
        message = str(err)
        if not message.startswith(KEY):
            message = f"{KEY}: {message}"
        raise type(err)(message) from None


def _version(path: Path) -> tuple[int, int] | None:
    """``(mtime, size)`` of ``path``, None when it is not there."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=4)
def _read(path: Path, version: tuple[int, int] | None,
          rejected_version: tuple[int, int] | None) -> InjectionList:
    """``read_campaign_injections`` of one version of the file and of aframe's rejected draws
    beside it (``injections_aframe.REJECTED_FILE``; the merge asks often)."""
    listing = read_injection_listing(path)
    return InjectionList(path, tuple(listing.injections),
                         population_record(listing.attrs, listing.waveform,
                                           len(listing.injections), path))


def population_record(attrs: dict[str, Any], waveform: dict[str, Any], listed: int,
                      source: Path | str) -> dict[str, Any] | None:
    """The population beside a VT: ``POPULATION_KEYS`` from ``attrs`` (the waveform's
    approximant and ``f_lower_hz`` where ``attrs`` lacks them), ``listed`` the file's rows
    (also ``injected`` where ``attrs`` does not say it); None when ``attrs`` says nothing of a
    population (no ``redshift_max`` and no ``time_volume_gpc3``)."""
    if attrs.get("redshift_max") is None and attrs.get("time_volume_gpc3") is None:
        return None
    record = {key: attrs.get(key, waveform.get(key)) for key in POPULATION_KEYS}
    record["listed"] = listed
    if record["injected"] is None:
        record["injected"] = listed
    if (record["luminosity_distance_max_mpc"] is None and record["redshift_max"] is not None
            and record["cosmology"] in (None, COSMOLOGY)):
        record["luminosity_distance_max_mpc"] = float(
            luminosity_distance_mpc(float(record["redshift_max"])))
    record["source"] = os.fspath(source)
    return record
