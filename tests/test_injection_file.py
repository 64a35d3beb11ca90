"""Tests of the injection set files (offline_iaas.data.injection_file): HDF5 and LIGO_LW."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
from igwn_ligolw import ligolw, lsctables
from igwn_ligolw import utils as ligolw_utils

from offline_iaas.data.injection_file import (
    InjectionSet,
    read_injection_set,
    write_injection_set,
)
from offline_iaas.data.population import (
    PopulationSpec,
    draw_binaries,
    luminosity_distance_mpc,
)
from offline_iaas.data.waveforms import BinaryParameters
from offline_iaas.errors import ConfigError, DataError

SPEC = PopulationSpec("IMRPhenomD", 20.0, 20.0, 50.0, 0.5, 0.4)
FIELDS = [f.name for f in dataclasses.fields(BinaryParameters)]
FLOAT32 = 2e-7
"""LIGO_LW's sim_inspiral columns are real_4: relative precision ~6e-8, 1e-7 after the
redshift is recomputed from the distance."""


def sample_set(n: int = 6) -> InjectionSet:
    binaries = draw_binaries(SPEC, n, np.random.default_rng(2))
    binaries = [dataclasses.replace(b, gps_time=1262304000.0 + 30.0 * i + 0.123456789,
                                    spin_1x=0.01 * i) for i, b in enumerate(binaries)]
    snr = {"H1": tuple(5.0 + i for i in range(n)), "L1": tuple(3.0 + 2 * i for i in range(n))}
    arrival = {ifo: tuple(b.gps_time + d for b in binaries)
               for ifo, d in (("H1", 0.0051), ("L1", -0.0032))}
    return InjectionSet(tuple(binaries), "IMRPhenomD", 20.0, snr, arrival, SPEC.attrs())


def assert_same_binaries(a: InjectionSet, b: InjectionSet, rtol: float) -> None:
    assert len(a) == len(b)
    for x, y in zip(a.binaries, b.binaries, strict=True):
        for name in FIELDS:
            tolerance = 2e-9 if name == "gps_time" else rtol * max(1.0, abs(getattr(x, name)))
            assert abs(getattr(x, name) - getattr(y, name)) <= tolerance, (name, x, y)


@pytest.mark.parametrize("name", ["set.h5", "set.hdf5"])
def test_hdf5_round_trip_is_exact(tmp_path: Path, name: str) -> None:
    original = sample_set()
    write_injection_set(tmp_path / name, original)
    back = read_injection_set(tmp_path / name)
    assert back.binaries == original.binaries
    assert back.snr == original.snr and back.arrival_time == original.arrival_time
    assert (back.approximant, back.f_lower_hz) == ("IMRPhenomD", 20.0)
    # the approximant and f_lower are the set's fields, the rest of the population's attrs
    assert back.attrs == pytest.approx({k: v for k, v in original.attrs.items()
                                        if k not in ("approximant", "f_lower_hz")})
    assert back.attrs["time_volume_gpc3"] > 0 and back.attrs["cosmology"] == "Planck18"
    np.testing.assert_allclose(back.network_snr, np.hypot(original.snr["H1"], original.snr["L1"]))
    with h5py.File(tmp_path / name) as f:  # the aframe ledger layout
        assert f.attrs["length"] == 6
        params = f["parameters"]
        np.testing.assert_allclose(params["chirp_mass"][:],
                                   [b.chirp_mass for b in original.binaries])
        np.testing.assert_array_equal(params["psi"][:],
                                      [b.polarization for b in original.binaries])
        assert {"injection_time", "h1_snr", "l1_time", "snr", "phase"} <= set(params)


@pytest.mark.parametrize("name", ["set.xml", "set.xml.gz"])
def test_ligolw_round_trip_to_float32(tmp_path: Path, name: str) -> None:
    original = sample_set()
    write_injection_set(tmp_path / name, original)
    back = read_injection_set(tmp_path / name)
    assert_same_binaries(original, back, FLOAT32)
    for ifo in ("H1", "L1"):
        np.testing.assert_allclose(back.snr[ifo], original.snr[ifo], rtol=FLOAT32)
        np.testing.assert_allclose(back.arrival_time[ifo], original.arrival_time[ifo],
                                   rtol=0, atol=2e-9)
    assert (back.approximant, back.f_lower_hz) == ("IMRPhenomD", 20.0)
    if name.endswith(".gz"):
        assert (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
    # control: a binary moved by 1e-5 of its distance is told apart
    moved = dataclasses.replace(original.binaries[0], luminosity_distance=original.binaries[0]
                                .luminosity_distance * (1 + 1e-5))
    with pytest.raises(AssertionError):
        assert_same_binaries(dataclasses.replace(original, binaries=(moved,
                             *original.binaries[1:])), back, FLOAT32)


def test_reads_a_sim_inspiral_table_written_with_igwn_ligolw(tmp_path: Path) -> None:
    """Detector-frame masses, redshift from the distance (Planck18)."""
    z = 0.25
    distance = float(luminosity_distance_mpc(z))
    xmldoc = ligolw.Document()
    root = xmldoc.appendChild(ligolw.LIGO_LW())
    table = root.appendChild(lsctables.SimInspiralTable.new(columns=[
        "process:process_id", "simulation_id", "waveform", "f_lower", "geocent_end_time",
        "geocent_end_time_ns", "mass1", "mass2", "distance", "longitude", "latitude",
        "inclination", "polarization", "coa_phase", "spin1z", "spin2z"]))
    row = table.RowType(process_id=0, simulation_id=0, waveform="IMRPhenomD", f_lower=15.0,
                        geocent_end_time=1262304100, geocent_end_time_ns=250000000,
                        mass1=45.0, mass2=37.5, distance=distance, longitude=1.5,
                        latitude=-0.3, inclination=2.0, polarization=0.4, coa_phase=3.0,
                        spin1z=0.2, spin2z=-0.1)
    table.append(row)
    ligolw_utils.write_filename(xmldoc, str(tmp_path / "theirs.xml"))

    got = read_injection_set(tmp_path / "theirs.xml")
    expected = BinaryParameters(
        mass_1=36.0, mass_2=30.0, redshift=z, luminosity_distance=distance, inclination=2.0,
        polarization=0.4, ra=1.5, dec=-0.3, coalescence_phase=3.0, gps_time=1262304100.25,
        spin_1z=0.2, spin_2z=-0.1)
    assert_same_binaries(InjectionSet((expected,), "IMRPhenomD", 15.0), got, FLOAT32)
    assert (got.approximant, got.f_lower_hz, dict(got.snr)) == ("IMRPhenomD", 15.0, {})


def test_reads_an_hdf5_file_written_with_h5py(tmp_path: Path) -> None:
    """Only the required columns: spins 0, redshift from the distance, defaults stand in."""
    distance = float(luminosity_distance_mpc(0.1))
    with h5py.File(tmp_path / "theirs.h5", "w") as f:
        group = f.create_group("parameters")
        for name, value in {"mass_1": 40.0, "mass_2": 25.0, "luminosity_distance": distance,
                            "ra": 0.5, "dec": 0.2, "psi": 1.0, "inclination": 0.3,
                            "phase": 2.5, "injection_time": 1262304200.5}.items():
            group.create_dataset(name, data=np.array([value]))
        group.create_dataset("shift", data=np.zeros((1, 2)))  # aframe's, not ours: ignored
    got = read_injection_set(tmp_path / "theirs.h5", approximant="IMRPhenomXPHM",
                             f_lower_hz=18.0)
    expected = BinaryParameters(
        mass_1=40.0, mass_2=25.0, redshift=0.1, luminosity_distance=distance, inclination=0.3,
        polarization=1.0, ra=0.5, dec=0.2, coalescence_phase=2.5, gps_time=1262304200.5)
    assert_same_binaries(InjectionSet((expected,), "x", 1.0), got, 1e-9)
    assert (got.approximant, got.f_lower_hz) == ("IMRPhenomXPHM", 18.0)
    with pytest.raises(DataError, match="theirs.h5.*'approximant'"):
        read_injection_set(tmp_path / "theirs.h5")  # nothing to stand in


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    write_injection_set(tmp_path / "set.h5", sample_set())
    with h5py.File(tmp_path / "set.h5", "a") as f:
        del f["parameters/dec"]
    with pytest.raises(DataError, match=r"set\.h5.*'parameters/dec'"):
        read_injection_set(tmp_path / "set.h5")
    xmldoc = ligolw.Document()
    root = xmldoc.appendChild(ligolw.LIGO_LW())
    root.appendChild(lsctables.SimInspiralTable.new(columns=[
        "geocent_end_time", "geocent_end_time_ns", "mass1", "mass2", "longitude", "latitude",
        "inclination", "polarization", "coa_phase"]))
    ligolw_utils.write_filename(xmldoc, str(tmp_path / "set.xml"))
    with pytest.raises(DataError, match=r"set\.xml.*'distance'"):
        read_injection_set(tmp_path / "set.xml")


def test_bad_files_raise_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must end in"):
        read_injection_set(tmp_path / "set.txt")
    with pytest.raises(ConfigError, match="not found"):
        read_injection_set(tmp_path / "absent.h5")
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(DataError, match="junk.h5"):
        read_injection_set(tmp_path / "junk.h5")
    (tmp_path / "junk.xml").write_text("<not ligolw")
    with pytest.raises(DataError, match="junk.xml"):
        read_injection_set(tmp_path / "junk.xml")
    write_injection_set(tmp_path / "nan.h5", sample_set())
    with h5py.File(tmp_path / "nan.h5", "a") as f:
        f["parameters/ra"][2] = np.nan
    with pytest.raises(DataError, match="'ra' is not finite in row 2"):
        read_injection_set(tmp_path / "nan.h5")


def test_the_merge_counts_an_injection_set_with_its_volume(tmp_path: Path) -> None:
    from offline_iaas.data.injection_file import read_injection_list

    original = sample_set()
    with_volume = dataclasses.replace(original, attrs={**original.attrs,
                                                       "time_volume_gpc3": 13.32})
    write_injection_set(tmp_path / "set.h5", with_volume)
    found, volume = read_injection_list(tmp_path / "set.h5")
    assert volume == pytest.approx(13.32)
    assert [i.gps_time for i in found] == [b.gps_time for b in original.binaries]
    assert [i.chirp_mass for i in found] == [b.chirp_mass for b in original.binaries]
    assert [i.distance_mpc for i in found] == [b.luminosity_distance for b in original.binaries]
    np.testing.assert_allclose([i.network_snr for i in found],
                               np.hypot(original.snr["H1"], original.snr["L1"]))
    write_injection_set(tmp_path / "set.xml.gz", original)  # LIGO_LW carries no volume
    assert read_injection_list(tmp_path / "set.xml.gz")[1] is None
