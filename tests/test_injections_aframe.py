"""aframe's injection files (offline_iaas.search.injections_aframe).

The fixture is written here with h5py from aframe's published schema, read from
github.com/ML4GW/aframe at commit 6a45a6e9cef86c4542acb27e3e3b7db65051eb82:
``libs/ledger/ledger/ledger.py`` (``Ledger.write``: ``parameters``/``waveforms`` groups, the
``length`` attribute, metadata fields as root attributes), ``libs/ledger/ledger/injections.py``
(``InjectionParameterSet``'s fields, ``InterferometerResponseSet``'s ``injection_time`` and
``shift``, the metadata ``ifos``, ``sample_rate``, ``duration``, ``right_pad``,
``num_injections``) and ``projects/data/data/waveforms/testing.py``/``rejection.py`` (float64
rows, 2-D ``ifo_snrs`` and ``shift``, one ``waveforms/<ifo>`` per detector). Not this
project's writer: the check that our reader reads aframe's files as they are.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import lal
import lalsimulation as ls
import numpy as np
import pytest
from astropy.cosmology import Planck15

from offline_iaas.errors import DataError, exit_code
from offline_iaas.search.injection_file import (
    hdf5_layout,
    read_injection_list,
    read_injection_set,
    write_injection_set,
)
from offline_iaas.search.injections_aframe import AFRAME_COMMIT
from tests.error_catalogue import documented, documented_refusals
from tests.injection_samples import sample_set

INJECTION_PARAMETER_SET = ("mass_1", "mass_2", "a_1", "a_2", "tilt_1", "tilt_2", "phi_12",
                           "phi_jl", "ra", "dec", "redshift", "psi", "theta_jn", "phase",
                           "snr", "ifo_snrs")
"""aframe's InjectionParameterSet parameter fields (IntrinsicParameterSet's, then
ExtrinsicParameterSet's, then its own), at the commit above."""
ROWS = {  # row 0: aligned spins (tilt 0 and pi); row 1: precessing
    "mass_1": [44.0, 60.0], "mass_2": [33.0, 25.0], "a_1": [0.3, 0.6], "a_2": [0.2, 0.4],
    "tilt_1": [0.0, 1.0], "tilt_2": [np.pi, 2.2], "phi_12": [0.0, 0.7], "phi_jl": [0.0, 2.9],
    "ra": [1.1, 4.0], "dec": [-0.4, 0.9], "redshift": [0.2, 0.35], "psi": [0.3, 2.0],
    "theta_jn": [0.5, 2.4], "phase": [1.5, 5.0], "snr": [17.0, 9.0],
    "ifo_snrs": [[12.0, 12.0], [6.0, 6.7]],
    "injection_time": [1262304100.25, 1262304200.75], "shift": [[0.0, 0.0], [0.0, 0.0]],
}


def aframe_file(path: Path, rows: dict = ROWS, with_times: bool = True) -> None:
    """A file as aframe's testing_waveforms writes its injected set (waveforms.hdf5), or
    without ``injection_time``/``shift``/waveforms as its rejected-parameters.hdf5."""
    n = len(rows["mass_1"])
    with h5py.File(path, "w") as f:
        f.attrs["length"] = n
        group = f.create_group("parameters")
        for name in (*INJECTION_PARAMETER_SET, *(("injection_time", "shift") if with_times
                                                 else ())):
            group.create_dataset(name, data=np.asarray(rows[name], np.float64))
        f.attrs["ifos"] = ["H1", "L1"]
        if with_times:
            waveforms = f.create_group("waveforms")
            for ifo in ("h1", "l1"):
                waveforms.create_dataset(ifo, data=np.zeros((n, 64)))
            f.attrs.update({"sample_rate": 2048.0, "duration": 8.0, "right_pad": 0.5,
                            "num_injections": 40})


def test_the_commit_read_is_recorded() -> None:
    assert AFRAME_COMMIT == "6a45a6e9cef86c4542acb27e3e3b7db65051eb82"


def test_reads_aframes_file_as_it_is(tmp_path: Path) -> None:
    aframe_file(tmp_path / "waveforms.hdf5")
    assert hdf5_layout(tmp_path / "waveforms.hdf5") == "aframe"
    got = read_injection_set(tmp_path / "waveforms.hdf5", approximant="IMRPhenomPv2",
                             f_lower_hz=20.0)
    z = np.array(ROWS["redshift"])
    detector = np.array(ROWS["mass_1"])
    source = [b.mass_1 for b in got.binaries]
    np.testing.assert_allclose(source, detector / (1 + z), rtol=1e-15)  # (1 + z) once
    assert not np.allclose(source, detector / (1 + z) ** 2, rtol=1e-3)  # control: twice
    np.testing.assert_allclose([b.mass_1_detector for b in got.binaries], detector, rtol=1e-15)
    np.testing.assert_allclose([b.mass_2 for b in got.binaries],
                               np.array(ROWS["mass_2"]) / (1 + z), rtol=1e-15)
    np.testing.assert_allclose([b.luminosity_distance for b in got.binaries],
                               Planck15.luminosity_distance(z).to_value("Mpc"), rtol=1e-12)
    assert [b.gps_time for b in got.binaries] == ROWS["injection_time"]
    assert [(b.ra, b.dec, b.polarization, b.coalescence_phase) for b in got.binaries] == list(
        zip(ROWS["ra"], ROWS["dec"], ROWS["psi"], ROWS["phase"], strict=True))
    assert got.snr == {"H1": (12.0, 6.0), "L1": (12.0, 6.7)} and got.snr_design == {}
    np.testing.assert_allclose(got.network_snr, [np.hypot(12, 12), np.hypot(6, 6.7)])
    assert got.reference_hz == 50.0  # aframe's configs; the file does not say
    # aframe's own attributes are the layout's, not a population; num_injections the draws
    assert not set(got.attrs) & {"length", "ifos", "sample_rate", "duration", "right_pad",
                                 "num_injections"}
    assert (got.attrs["drawn"], got.attrs["injected"]) == (40, 2)


def test_aligned_spins_come_back_along_the_orbital_momentum(tmp_path: Path) -> None:
    """Independent of the conversion: tilt 0 is spin_z = a, tilt pi is spin_z = -a, no
    in-plane spin, and the inclination is theta_jn (J along L)."""
    aframe_file(tmp_path / "waveforms.hdf5")
    aligned = read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomD", 20.0).binaries[0]
    assert aligned.spin_1z == pytest.approx(0.3, abs=1e-15)
    assert aligned.spin_2z == pytest.approx(-0.2, abs=1e-15)
    for name in ("spin_1x", "spin_1y", "spin_2x", "spin_2y"):
        assert getattr(aligned, name) == pytest.approx(0.0, abs=1e-15)
    assert aligned.inclination == pytest.approx(0.5, abs=1e-15)


def test_precessing_spins_follow_lalsimulation_at_the_reference_frequency(tmp_path: Path
                                                                          ) -> None:
    aframe_file(tmp_path / "waveforms.hdf5")
    row = {name: values[1] for name, values in ROWS.items()}

    def direct(f_ref: float) -> np.ndarray:
        return np.array(ls.SimInspiralTransformPrecessingNewInitialConditions(
            row["theta_jn"], row["phi_jl"], row["tilt_1"], row["tilt_2"], row["phi_12"],
            row["a_1"], row["a_2"], row["mass_1"] * lal.MSUN_SI, row["mass_2"] * lal.MSUN_SI,
            f_ref, row["phase"]))

    for f_ref in (50.0, 20.0):
        b = read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2", 20.0,
                               reference_frequency_hz=f_ref if f_ref != 50.0 else None
                               ).binaries[1]
        ours = np.array([b.inclination, b.spin_1x, b.spin_1y, b.spin_1z, b.spin_2x,
                         b.spin_2y, b.spin_2z])
        np.testing.assert_allclose(ours, direct(f_ref), rtol=0, atol=1e-14)
    assert np.abs(direct(20.0) - direct(50.0)).max() > 0.01  # control: f_ref matters
    assert np.hypot(b.spin_1x, np.hypot(b.spin_1y, b.spin_1z)) == pytest.approx(0.6)


def test_a_parameter_set_without_times_is_refused(tmp_path: Path) -> None:
    """aframe's rejected-parameters.hdf5 (an InjectionParameterSet) has no injection_time."""
    aframe_file(tmp_path / "rejected-parameters.hdf5", with_times=False)
    with pytest.raises(DataError, match=r"rejected-parameters\.hdf5: aframe injection file "
                       r"has no 'parameters/injection_time'") as caught:
        read_injection_set(tmp_path / "rejected-parameters.hdf5", "IMRPhenomD", 20.0)
    documented("injection-aframe-without-times", str(caught.value),
               {tmp_path / "rejected-parameters.hdf5": "F"}, exit_code=exit_code(DataError))


def test_a_missing_aframe_field_and_a_contradicting_frame_are_named(tmp_path: Path) -> None:
    aframe_file(tmp_path / "w.hdf5")
    with h5py.File(tmp_path / "w.hdf5", "a") as f:
        del f["parameters/phi_jl"]
    refusals = {}
    with pytest.raises(DataError, match=r"w\.hdf5: aframe injection file has no field "
                       r"'parameters/phi_jl'") as refusals["injection-aframe-missing-field"]:
        read_injection_set(tmp_path / "w.hdf5", "IMRPhenomD", 20.0)
    aframe_file(tmp_path / "w.hdf5")
    with h5py.File(tmp_path / "w.hdf5", "a") as f:
        f.attrs["mass_frame"] = "source"
    with pytest.raises(DataError, match=r"w\.hdf5: aframe's layout .* detector-frame "
                       r"masses") as refusals["injection-aframe-source-frame"]:
        read_injection_set(tmp_path / "w.hdf5", "IMRPhenomD", 20.0)
    aframe_file(tmp_path / "w.hdf5")
    with h5py.File(tmp_path / "w.hdf5", "a") as f:
        f.attrs["length"] = 3
    with pytest.raises(DataError, match=r"w\.hdf5: attribute length = "
                       r"3") as refusals["injection-length-not-rows"]:
        read_injection_set(tmp_path / "w.hdf5", "IMRPhenomD", 20.0)
    documented_refusals(refusals, {tmp_path / "w.hdf5": "F"})


def test_writes_aframes_schema(tmp_path: Path) -> None:
    """Read back with h5py against aframe's schema: every InjectionParameterSet field a
    float64 dataset of length rows (ifo_snrs: rows x detectors, in ``ifos`` order), detector-
    frame masses, a redshift whose Planck15 distance is the set's, ``length`` and ``ifos``."""
    original = sample_set(4)
    write_injection_set(tmp_path / "aframe.h5", original, layout="aframe")
    with h5py.File(tmp_path / "aframe.h5") as f:
        assert int(f.attrs["length"]) == 4
        assert [str(i) for i in f.attrs["ifos"]] == ["H1", "L1"]
        params = f["parameters"]
        for name in INJECTION_PARAMETER_SET:
            assert params[name].dtype == np.float64, name
            assert params[name].shape == ((4, 2) if name == "ifo_snrs" else (4,)), name
        assert params["injection_time"].shape == (4,) and params["shift"].shape == (4, 2)
        np.testing.assert_allclose(params["mass_1"][:], [b.mass_1 * (1 + b.redshift)
                                                         for b in original.binaries])
        np.testing.assert_allclose(
            Planck15.luminosity_distance(params["redshift"][:]).to_value("Mpc"),
            [b.luminosity_distance for b in original.binaries], rtol=1e-10)
        np.testing.assert_array_equal(params["ifo_snrs"][:, 1], original.snr["L1"])
        np.testing.assert_allclose(params["snr"][:], original.network_snr)
        np.testing.assert_array_equal(params["ifo_snrs_design"][:, 0], original.snr_design["H1"])
        aligned = original.binaries[0]  # no in-plane spin: a = |spin_z|, tilt 0 or pi
        assert params["a_1"][0] == pytest.approx(abs(aligned.spin_1z), abs=1e-15)
        assert params["tilt_1"][0] == pytest.approx(0.0 if aligned.spin_1z > 0 else np.pi)
        assert params["theta_jn"][0] == pytest.approx(aligned.inclination, abs=1e-14)
        assert f.attrs["mass_frame"] == "detector"
        assert f.attrs["reference_frequency_hz"] == 25.0


def test_aframe_round_trip_keeps_the_signal(tmp_path: Path) -> None:
    """Detector-frame masses, distance, spins, angles and time come back; the source-frame
    masses follow aframe's cosmology (Planck15) rather than the population's (Planck18)."""
    original = sample_set()
    write_injection_set(tmp_path / "aframe.h5", original, layout="aframe")
    back = read_injection_set(tmp_path / "aframe.h5")
    for a, b in zip(original.binaries, back.binaries, strict=True):
        assert b.mass_1_detector == pytest.approx(a.mass_1_detector, rel=1e-12)
        assert b.mass_2_detector == pytest.approx(a.mass_2_detector, rel=1e-12)
        assert b.luminosity_distance == pytest.approx(a.luminosity_distance, rel=1e-12)
        for name in ("inclination", "spin_1x", "spin_1y", "spin_1z", "spin_2x", "spin_2y",
                     "spin_2z", "ra", "dec", "polarization", "coalescence_phase", "gps_time"):
            assert getattr(b, name) == pytest.approx(getattr(a, name), abs=1e-12), name
        assert b.redshift != pytest.approx(a.redshift, rel=1e-4)  # Planck15, not Planck18
    assert back.snr == original.snr and back.snr_design == original.snr_design
    assert (back.approximant, back.f_lower_hz, back.reference_hz) == ("IMRPhenomD", 20.0, 25.0)
    assert back.attrs["time_volume_gpc3"] == pytest.approx(original.attrs["time_volume_gpc3"])
    moved = dataclasses.replace(original.binaries[1], spin_1x=original.binaries[1].spin_1x + 1e-6)
    assert moved.spin_1x != pytest.approx(back.binaries[1].spin_1x, abs=1e-12)  # control


def test_the_merge_reads_aframes_file(tmp_path: Path) -> None:
    aframe_file(tmp_path / "waveforms.hdf5")
    found, _ = read_injection_list(tmp_path / "waveforms.hdf5")
    assert [i.gps_time for i in found] == ROWS["injection_time"]
    assert found[0].network_snr == pytest.approx(np.hypot(12.0, 12.0))
    # without num_injections nor rejected draws nothing says how many were drawn: no volume
    with h5py.File(tmp_path / "waveforms.hdf5", "a") as f:
        del f.attrs["num_injections"]
    assert read_injection_list(tmp_path / "waveforms.hdf5")[1] is None


# ---- what VT needs of aframe's files -----------------------------------------------------------


def planck15_time_volume_gpc3(z_max: float) -> float:
    """``int_0^z_max 4 pi dVc/dz/dOmega / (1 + z) dz`` in Planck15 (astropy, trapezoid on a
    fine grid: independent of the project's quadrature)."""
    z = np.linspace(0.0, z_max, 200_001)
    density = 4 * np.pi * Planck15.differential_comoving_volume(z).to_value("Gpc3 / sr") / (1 + z)
    return float(np.sum(0.5 * (density[1:] + density[:-1]) * np.diff(z)))


def rejected_file(path: Path, redshifts: list[float]) -> None:
    """aframe's rejected-parameters.hdf5: an InjectionParameterSet of the draws below the cut
    (``rejection.py``), ``len(redshifts)`` rows."""
    n = len(redshifts)
    rows = {name: [values[0]] * n for name, values in ROWS.items()}
    rows["redshift"] = redshifts
    aframe_file(path, rows, with_times=False)


def test_a_non_zero_shift_is_refused_not_read_as_zero_lag(tmp_path: Path) -> None:
    rows = {**ROWS, "shift": [[0.0, 0.0], [0.0, 1.0]]}
    aframe_file(tmp_path / "waveforms.hdf5", rows)
    with pytest.raises(DataError, match=r"waveforms\.hdf5: 1 of 2 injections have a non-zero "
                       r"'parameters/shift' \(row 1: \[0\.0, 1\.0\] s\)") as caught:
        read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2", 20.0)
    assert "\n" not in str(caught.value)
    documented("injection-aframe-shift", str(caught.value),
               {tmp_path / "waveforms.hdf5": "F"}, exit_code=exit_code(DataError))
    with pytest.raises(DataError, match="non-zero 'parameters/shift'"):
        read_injection_list(tmp_path / "waveforms.hdf5")  # the merge's reading too
    # control: the same rows at zero shift are read
    aframe_file(tmp_path / "waveforms.hdf5")
    assert len(read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2", 20.0)) == 2


def test_vt_comes_out_of_an_aframe_campaign_with_its_rejected_draws(tmp_path: Path) -> None:
    """waveforms.hdf5 (2 injected, num_injections 40) and rejected-parameters.hdf5 beside it
    (5 draws below the cut, the largest at z 0.5): drawn = 2 + 5, the volume aframe's
    UniformSourceFrame in Planck15 to z 0.5; VT = V T found / (held out x drawn / injected)
    through the merge, against numbers known here."""
    from offline_iaas.config import config_from_dict
    from offline_iaas.science.bbhnet.injections import injection_results
    from offline_iaas.search.injection_list import read_campaign_injections

    aframe_file(tmp_path / "waveforms.hdf5")
    rejected_file(tmp_path / "rejected-parameters.hdf5", [0.1, 0.5, 0.3, 0.45, 0.2])
    listed = read_campaign_injections(tmp_path / "waveforms.hdf5")
    population = listed.population
    assert (population["injected"], population["drawn"]) == (2, 7)
    assert population["cosmology"] == "Planck15" and population["redshift_max"] == 0.5
    volume = planck15_time_volume_gpc3(0.5)
    assert population["time_volume_gpc3"] == pytest.approx(volume, rel=1e-6)
    # one trigger of IFAR 2 yr on the first injection, none near the second; 300 s analysed
    t0, t1 = ROWS["injection_time"]
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": t0 - 100,
                    "duration": 300, "sample_rate": 16},
           "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
           "search": {"found_seconds": 1.0, "slides": 2}}
    config = config_from_dict(raw, tmp_path / "c.toml")
    result = injection_results(config.search, listed, np.array([t0]), np.ones(1), np.array([2.0]),
                               [(t0 - 100, t0 + 200)], {}, 10 * 365.25 * 86400)
    point = result["sensitivity"]["at"]["1 year"]
    assert (point["found"], point["injections"], point["trials"]) == (1, 2, 7.0)
    expected = volume * 300 / (365.25 * 86400) * 1 / 7  # V T found / drawn
    assert point["vt_gpc3_years"] == pytest.approx(expected, rel=1e-6)
    assert t1 < t0 + 200  # both held out
    # control: without the rejected draws, drawn is aframe's num_injections (40), not 7
    (tmp_path / "rejected-parameters.hdf5").unlink()
    assert read_campaign_injections(tmp_path / "waveforms.hdf5").population["drawn"] == 40


def test_rejected_draws_of_another_campaign_are_refused(tmp_path: Path) -> None:
    aframe_file(tmp_path / "waveforms.hdf5")  # num_injections 40
    rejected_file(tmp_path / "rejected-parameters.hdf5", [0.2] * 39)  # 2 + 39 > 40
    with pytest.raises(DataError, match=r"2 injections and 39 rejected draws in "
                       r"rejected-parameters\.hdf5 make 41 draws, more than its "
                       r"num_injections = 40") as caught:
        read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2", 20.0)
    documented("injection-aframe-rejected-mismatch", str(caught.value),
               {tmp_path / "waveforms.hdf5": "F"}, exit_code=exit_code(DataError))
    rejected_file(tmp_path / "rejected-parameters.hdf5", [0.2] * 38)  # control: 40 draws
    assert read_injection_list(tmp_path / "waveforms.hdf5")[1] is not None


def test_precessing_spins_at_another_reference_frequency_are_flagged_for_aframe(
        tmp_path: Path) -> None:
    """aframe reads the reference frequency from its pipeline's configuration (50 Hz), not
    from the file: every write says what to set there; spins defined at 25 Hz are flagged as
    precessing binaries that differ at 50 Hz; aligned spins (the same angles at any reference
    frequency) and a set at 50 Hz are not."""
    from tests.helpers import captured_log

    original = sample_set(3)  # precessing from the second on, defined at 25 Hz
    with captured_log() as lines:
        write_injection_set(tmp_path / "a.h5", original, layout="aframe")
    assert any("a.h5: aframe reads the reference frequency from its config, not from this "
               "file: set reference_frequency = 25 in its [luigi_base]" in line
               and "2 precessing binaries differ at aframe's default 50 Hz" in line
               for line in lines), lines
    for quiet in (sample_set(1), dataclasses.replace(original, reference_frequency_hz=50.0)):
        with captured_log() as lines:
            write_injection_set(tmp_path / "b.h5", quiet, layout="aframe")
        assert not any("precessing" in line for line in lines), lines
        assert any("aframe reads the reference frequency" in line for line in lines), lines

