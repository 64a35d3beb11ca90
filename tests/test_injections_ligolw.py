"""LIGO_LW sim_inspiral injection files (offline_iaas.search.injections_ligolw), proven by the
other side: LAL's C reader (``lalmetaio``) reads what we write, and we read a table written
directly with igwn-ligolw with every column LAL's reader requires."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import lal
import lalmetaio
import numpy as np
import pytest
from igwn_ligolw import ligolw, lsctables
from igwn_ligolw import utils as ligolw_utils

from offline_iaas.errors import exit_code
from offline_iaas.search.injection_file import InjectionSet, read_injection_set, write_injection_set
from offline_iaas.search.population import luminosity_distance_mpc
from offline_iaas.search.waveforms import BinaryParameters
from tests.error_catalogue import documented
from tests.injection_samples import FLOAT32, assert_same_binaries, sample_set

LAL_REQUIRED = (
    "process:process_id", "waveform", "geocent_end_time", "geocent_end_time_ns", "h_end_time",
    "h_end_time_ns", "l_end_time", "l_end_time_ns", "g_end_time", "g_end_time_ns",
    "t_end_time", "t_end_time_ns", "v_end_time", "v_end_time_ns", "end_time_gmst", "source",
    "mass1", "mass2", "eta", "distance", "longitude", "latitude", "inclination", "coa_phase",
    "polarization", "psi0", "psi3", "alpha", "alpha1", "alpha2", "alpha3", "alpha4", "alpha5",
    "alpha6", "beta", "spin1x", "spin1y", "spin1z", "spin2x", "spin2y", "spin2z", "theta0",
    "phi0", "f_lower", "f_final", "mchirp", "eff_dist_h", "eff_dist_l", "eff_dist_g",
    "eff_dist_t", "eff_dist_v", "numrel_mode_min", "numrel_mode_max", "numrel_data",
    "amp_order", "taper", "bandpass", "simulation_id",
)
"""The columns ``XLALSimInspiralTableFromLIGOLw`` requires (lalsuite's
``lalmetaio/lib/sim_inspiral.c``), listed here from its source, not from the writer."""


def lal_rows(path: Path) -> list:
    """The sim_inspiral rows as LAL's C reader returns them (a linked list)."""
    rows, row = [], lalmetaio.SimInspiralTableFromLIGOLw(str(path))
    while row is not None:
        rows.append(row)
        row = row.next
    return rows


def gps(seconds: float) -> tuple[int, int]:
    """LAL's own conversion of a float GPS time to (s, ns)."""
    t = lal.LIGOTimeGPS(seconds)
    return t.gpsSeconds, t.gpsNanoSeconds


def effective_distance(b: BinaryParameters, prefix: str) -> float:
    """From the definition, with LAL's antenna response."""
    gmst = lal.GreenwichMeanSiderealTime(lal.LIGOTimeGPS(b.gps_time))
    fp, fc = lal.ComputeDetAMResponse(lal.cached_detector_by_prefix[prefix].response,
                                      b.ra, b.dec, b.polarization, gmst)
    c = math.cos(b.inclination)
    return b.luminosity_distance / math.sqrt(fp**2 * ((1 + c * c) / 2) ** 2 + fc**2 * c * c)


def lal_mismatches(rows: list, injections: InjectionSet) -> list[str]:
    """What LAL read that differs from what was written (empty: all agree)."""
    problems = []

    def check(name: str, theirs: float, ours: float, rtol: float = 1e-6) -> None:
        if not abs(theirs - ours) <= rtol * max(1.0, abs(ours)):
            problems.append(f"row {i} {name}: {theirs} != {ours}")

    for i, (row, b) in enumerate(zip(rows, injections.binaries, strict=True)):
        if (row.geocent_end_time.gpsSeconds, row.geocent_end_time.gpsNanoSeconds) != gps(
                b.gps_time):
            problems.append(f"row {i} geocent_end_time: {row.geocent_end_time}")
        for ifo, site in (("H1", "h"), ("L1", "l")):
            t = getattr(row, f"{site}_end_time")
            if (t.gpsSeconds, t.gpsNanoSeconds) != gps(injections.arrival_time[ifo][i]):
                problems.append(f"row {i} {site}_end_time: {t}")
            check(f"eff_dist_{site}", getattr(row, f"eff_dist_{site}"),
                  effective_distance(b, ifo), 1e-5)
        check("mass1", row.mass1, b.mass_1 * (1 + b.redshift))
        check("mass2", row.mass2, b.mass_2 * (1 + b.redshift))
        check("distance", row.distance, b.luminosity_distance)
        for theirs, ours in (("longitude", "ra"), ("latitude", "dec"),
                             ("inclination", "inclination"), ("polarization", "polarization"),
                             ("coa_phase", "coalescence_phase")):
            check(theirs, getattr(row, theirs), getattr(b, ours))
        for k in (1, 2):
            for a in "xyz":
                check(f"spin{k}{a}", getattr(row, f"spin{k}{a}"), getattr(b, f"spin_{k}{a}"))
        check("alpha1", row.alpha1, injections.snr["H1"][i])
        check("alpha2", row.alpha2, injections.snr["L1"][i])
        check("alpha4", row.alpha4, injections.snr_design["H1"][i])
        check("alpha5", row.alpha5, injections.snr_design["L1"][i])
        if row.waveform != injections.approximant or row.f_lower != injections.f_lower_hz:
            problems.append(f"row {i} waveform/f_lower: {row.waveform} {row.f_lower}")
    return problems


@pytest.mark.parametrize("name", ["set.xml", "set.xml.gz"])
def test_lal_reads_what_we_write(tmp_path: Path, name: str) -> None:
    original = sample_set()
    write_injection_set(tmp_path / name, original)
    rows = lal_rows(tmp_path / name)
    assert len(rows) == 6 and lal_mismatches(rows, original) == []
    process = lalmetaio.ProcessTableFromLIGOLw(str(tmp_path / name))
    assert (process.program, process.ifos, process.next) == ("offline-iaas", "H1,L1", None)
    assert {row.process_id for row in rows} == {process.process_id}
    assert [row.simulation_id for row in rows] == list(range(6))
    params, row = {}, lalmetaio.ProcessParamsTableFromLIGOLw(str(tmp_path / name))
    while row is not None:
        params[row.param] = row.value
        row = row.next
    assert float(params["--time-volume-gpc3"]) == pytest.approx(
        original.attrs["time_volume_gpc3"])
    assert params["--redshift-max"] == "0.4" and params["--mass-frame"] == "detector"
    assert params["--snr-columns"] == "H1:alpha1,L1:alpha2"


def test_lal_comparison_catches_a_shift_and_a_perturbation(tmp_path: Path) -> None:
    """Negative controls of ``lal_mismatches``: one sample (1/4096 s) late, a mass 1e-5 off,
    a SNR swapped for the design one: each is seen."""
    original = sample_set()
    write_injection_set(tmp_path / "set.xml", original)
    rows = lal_rows(tmp_path / "set.xml")
    b = original.binaries[2]
    late = dataclasses.replace(original, binaries=(
        *original.binaries[:2], dataclasses.replace(b, gps_time=b.gps_time + 1 / 4096),
        *original.binaries[3:]))
    assert lal_mismatches(rows, late) == ["row 2 geocent_end_time: 1262304060.123456717"]
    heavy = dataclasses.replace(original, binaries=(
        *original.binaries[:2], dataclasses.replace(b, mass_1=b.mass_1 * (1 + 1e-5)),
        *original.binaries[3:]))
    assert [p.split(":")[0] for p in lal_mismatches(rows, heavy)] == ["row 2 mass1"]
    swapped = dataclasses.replace(original, snr=original.snr_design)
    assert len(lal_mismatches(rows, swapped)) == 12  # alpha1, alpha2 of every row


@pytest.mark.parametrize("name", ["set.xml", "set.xml.gz"])
def test_ligolw_round_trip_to_float32(tmp_path: Path, name: str) -> None:
    original = sample_set()
    write_injection_set(tmp_path / name, original)
    back = read_injection_set(tmp_path / name)
    assert_same_binaries(original, back, FLOAT32)
    for kind in ("snr", "snr_design"):
        assert getattr(back, kind).keys() == {"H1", "L1"}
        for ifo in ("H1", "L1"):
            np.testing.assert_allclose(getattr(back, kind)[ifo], getattr(original, kind)[ifo],
                                       rtol=FLOAT32)
    assert back.arrival_time.keys() == {"H1", "L1"}  # the process's ifos, not every site
    for ifo in ("H1", "L1"):
        np.testing.assert_allclose(back.arrival_time[ifo], original.arrival_time[ifo],
                                   rtol=0, atol=2e-9)
    assert (back.approximant, back.f_lower_hz, back.reference_hz) == ("IMRPhenomD", 20.0, 25.0)
    assert back.snr_psd == original.snr_psd
    expected = {k: v for k, v in original.attrs.items() if k not in ("approximant", "f_lower_hz")}
    assert back.attrs == pytest.approx(expected)  # the population, from process_params
    if name.endswith(".gz"):
        assert (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
    # control: a binary moved by 1e-5 of its distance is told apart
    moved = dataclasses.replace(original.binaries[0], luminosity_distance=original.binaries[0]
                                .luminosity_distance * (1 + 1e-5))
    with pytest.raises(AssertionError):
        assert_same_binaries(dataclasses.replace(original, binaries=(moved,
                             *original.binaries[1:])), back, FLOAT32)


def igwn_table(path: Path, alphas: tuple[float, float, float], f_lower: float = 15.0) -> None:
    """One sim_inspiral row with every column LAL requires, written with igwn-ligolw alone
    (as a pipeline outside this project would), with a process table."""
    z = 0.25
    xmldoc = ligolw.Document()
    root = xmldoc.appendChild(ligolw.LIGO_LW())
    process = xmldoc.register_process("their_inspinj", {"seed": 3}, instruments=["H1", "L1"])
    table = root.appendChild(lsctables.SimInspiralTable.new(columns=list(LAL_REQUIRED)))
    values = {name.split(":")[-1]: 0 for name in LAL_REQUIRED}
    values.update(source="", numrel_data="", taper="TAPER_NONE", amp_order=-1)
    values.update(
        process_id=process.process_id, simulation_id=0, waveform="IMRPhenomD", f_lower=f_lower,
        geocent_end_time=1262304100, geocent_end_time_ns=250000001, h_end_time=1262304100,
        h_end_time_ns=260000000, l_end_time=1262304100, l_end_time_ns=243000000,
        mass1=45.0, mass2=37.5, distance=float(luminosity_distance_mpc(z)), longitude=1.5,
        latitude=-0.3, inclination=2.0, polarization=0.4, coa_phase=3.0, spin1z=0.2,
        spin2z=-0.1, eff_dist_h=900.0, eff_dist_l=1100.0, alpha1=alphas[0], alpha2=alphas[1],
        alpha3=alphas[2], mchirp=35.8, eta=0.2479)
    table.append(table.RowType(**values))
    ligolw_utils.write_filename(xmldoc, str(path))


def test_reads_a_full_sim_inspiral_table_written_with_igwn_ligolw(tmp_path: Path) -> None:
    """Detector-frame masses to source frame with z from the distance (Planck18); the times as
    float64 GPS (~0.2 us); H1 and L1 arrival times (the sites with a time); no SNR where alpha
    is 0."""
    igwn_table(tmp_path / "theirs.xml", (0.0, 0.0, 0.0))
    [row] = lal_rows(tmp_path / "theirs.xml")  # the fixture is what LAL reads
    assert (row.mass1, row.geocent_end_time.gpsNanoSeconds) == (45.0, 250000001)
    got = read_injection_set(tmp_path / "theirs.xml")
    expected = BinaryParameters(
        mass_1=36.0, mass_2=30.0, redshift=0.25, luminosity_distance=row.distance,
        inclination=2.0, polarization=0.4, ra=1.5, dec=-0.3, coalescence_phase=3.0,
        gps_time=1262304100.250000001, spin_1z=0.2, spin_2z=-0.1)
    assert_same_binaries(InjectionSet((expected,), "IMRPhenomD", 15.0), got, FLOAT32)
    assert got.binaries[0].mass_1 != pytest.approx(45.0 / 1.25**2, rel=1e-3)  # not twice
    assert (got.approximant, got.f_lower_hz, got.reference_hz) == ("IMRPhenomD", 15.0, 15.0)
    assert got.arrival_time == {"H1": (1262304100.26,), "L1": (1262304100.243,)}
    assert (dict(got.snr), dict(got.snr_design), dict(got.attrs)) == ({}, {}, {})
    # control: one sample (1/4096 s) later is told apart
    later = dataclasses.replace(expected, gps_time=expected.gps_time + 1 / 4096)
    with pytest.raises(AssertionError):
        assert_same_binaries(InjectionSet((later,), "IMRPhenomD", 15.0), got, FLOAT32)


def test_a_foreign_table_without_f_lower_takes_the_stand_in(tmp_path: Path) -> None:
    igwn_table(tmp_path / "theirs.xml", (0.0, 0.0, 0.0), f_lower=0.0)
    assert read_injection_set(tmp_path / "theirs.xml", f_lower_hz=18.0).f_lower_hz == 18.0


def test_positive_alphas_of_a_foreign_table_are_its_snrs(tmp_path: Path) -> None:
    """As pycbc_optimal_snr fills them: alpha1/2/3 the H1/L1/V1 optimal SNRs."""
    igwn_table(tmp_path / "theirs.xml", (8.0, 6.0, 3.0))
    got = read_injection_set(tmp_path / "theirs.xml")
    assert got.snr == {"H1": (8.0,), "L1": (6.0,), "V1": (3.0,)}
    assert got.network_snr[0] == pytest.approx(math.sqrt(64 + 36 + 9))


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    from offline_iaas.errors import DataError

    xmldoc = ligolw.Document()
    root = xmldoc.appendChild(ligolw.LIGO_LW())
    root.appendChild(lsctables.SimInspiralTable.new(columns=[
        "geocent_end_time", "geocent_end_time_ns", "mass1", "mass2", "longitude", "latitude",
        "inclination", "polarization", "coa_phase"]))
    ligolw_utils.write_filename(xmldoc, str(tmp_path / "set.xml"))
    with pytest.raises(DataError, match=r"set\.xml.*'distance'") as caught:
        read_injection_set(tmp_path / "set.xml")
    documented("injection-ligolw-missing-column", str(caught.value), {tmp_path / "set.xml": "F"},
               exit_code=exit_code(DataError))
