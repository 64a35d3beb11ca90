"""Tests of the injection files (offline_iaas.search.injection_file): this project's HDF5 layout,
telling the layouts apart, the refusals, ``convert-injections`` and the merge's list.
aframe's layout: tests/test_injections_aframe.py; LIGO_LW: tests/test_injections_ligolw.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.bench.accounting import cpu_seconds
from offline_iaas.cli import main
from offline_iaas.data.gwf_reader import ALARM_MARGIN_SECONDS, GwfReader
from offline_iaas.errors import ConfigError, DataError, exit_code
from offline_iaas.search.injection_file import (
    InjectionSet,
    _read_parameters,
    hdf5_layout,
    read_injection_list,
    read_injection_set,
    write_injection_set,
)
from offline_iaas.search.population import luminosity_distance_mpc
from offline_iaas.search.waveforms import BinaryParameters
from tests.browser import alive, descendants
from tests.error_catalogue import cli_error, documented, documented_refusals
from tests.helpers import wait_for
from tests.injection_samples import assert_same_binaries, sample_set


@pytest.mark.parametrize("name", ["set.h5", "set.hdf5"])
def test_own_hdf5_round_trip_is_exact(tmp_path: Path, name: str) -> None:
    original = sample_set()
    write_injection_set(tmp_path / name, original)
    back = read_injection_set(tmp_path / name)
    assert back.binaries == original.binaries
    assert back.snr == original.snr and back.snr_design == original.snr_design
    assert back.arrival_time == original.arrival_time
    assert (back.approximant, back.f_lower_hz, back.reference_frequency_hz) == (
        "IMRPhenomD", 20.0, 25.0)
    assert back.snr_psd == original.snr_psd
    # the set's own fields apart, the attributes are the population's
    assert back.attrs == pytest.approx({k: v for k, v in original.attrs.items()
                                        if k not in ("approximant", "f_lower_hz")})
    assert back.attrs["time_volume_gpc3"] > 0 and back.attrs["cosmology"] == "Planck18"
    assert hdf5_layout(tmp_path / name) == "offline-iaas"
    with h5py.File(tmp_path / name) as f:  # read with h5py: what the layout promises
        assert (f.attrs["layout"], f.attrs["mass_frame"], f.attrs["length"]) == (
            "offline-iaas", "source", 6)
        params = f["parameters"]
        np.testing.assert_array_equal(params["mass_1"][:],
                                      [b.mass_1 for b in original.binaries])
        np.testing.assert_allclose(params["mass_1_detector"][:],
                                   [b.mass_1 * (1 + b.redshift) for b in original.binaries],
                                   rtol=1e-15)
        np.testing.assert_array_equal(params["h1_snr_measured"][:], original.snr["H1"])
        np.testing.assert_array_equal(params["l1_snr_design"][:], original.snr_design["L1"])
        np.testing.assert_allclose(params["snr_measured"][:],
                                   np.hypot(original.snr["H1"], original.snr["L1"]))
        assert f.attrs["snr_measured_psd"] == "Welch of the frames"
        assert {"injection_time", "l1_time", "snr_design", "phase", "psi"} <= set(params)


def by_hand(path: Path, **attrs: object) -> None:
    """One binary in a ``parameters`` group written with h5py, with root ``attrs``."""
    distance = float(luminosity_distance_mpc(0.1))
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        group = f.create_group("parameters")
        for name, value in {"mass_1": 44.0, "mass_2": 27.5, "luminosity_distance": distance,
                            "ra": 0.5, "dec": 0.2, "psi": 1.0, "inclination": 0.3,
                            "phase": 2.5, "injection_time": 1262304200.5}.items():
            group.create_dataset(name, data=np.array([value]))


def test_a_file_without_a_mass_frame_is_refused(tmp_path: Path) -> None:
    """Source or detector frame? Either guess could be wrong by 1 + z: refused, named."""
    by_hand(tmp_path / "theirs.h5")
    with pytest.raises(DataError, match=r"theirs\.h5: the frame of 'parameters/mass_1' is "
                       r"ambiguous.*mass_frame"):
        read_injection_set(tmp_path / "theirs.h5", approximant="IMRPhenomD", f_lower_hz=20.0)
    by_hand(tmp_path / "odd.h5", mass_frame="lab")
    with pytest.raises(DataError, match=r"odd\.h5: root attribute mass_frame is 'lab'") as caught:
        read_injection_set(tmp_path / "odd.h5")
    documented("injection-mass-frame-unknown", str(caught.value), {tmp_path / "odd.h5": "F"},
               exit_code=exit_code(DataError))


@pytest.mark.parametrize("frame, divisor", [("source", 1.0), ("detector", 1.1)])
def test_a_hand_made_file_says_its_mass_frame(tmp_path: Path, frame: str, divisor: float
                                              ) -> None:
    """Only the required columns: spins 0, redshift from the distance, stand-ins used;
    detector-frame masses divided by 1 + z once."""
    by_hand(tmp_path / "theirs.h5", mass_frame=frame)
    got = read_injection_set(tmp_path / "theirs.h5", approximant="IMRPhenomXPHM",
                             f_lower_hz=18.0)
    distance = float(luminosity_distance_mpc(0.1))
    expected = BinaryParameters(
        mass_1=44.0 / divisor, mass_2=27.5 / divisor, redshift=0.1,
        luminosity_distance=distance, inclination=0.3, polarization=1.0, ra=0.5, dec=0.2,
        coalescence_phase=2.5, gps_time=1262304200.5)
    assert_same_binaries(InjectionSet((expected,), "x", 1.0), got, 1e-9)
    assert (got.approximant, got.f_lower_hz, got.reference_hz) == ("IMRPhenomXPHM", 18.0, 18.0)
    with pytest.raises(DataError, match=r"theirs\.h5.*'approximant'") as caught:
        read_injection_set(tmp_path / "theirs.h5")  # nothing to stand in
    documented("injection-no-approximant", str(caught.value), {tmp_path / "theirs.h5": "F"},
               exit_code=exit_code(DataError))


def test_detector_masses_that_disagree_are_refused(tmp_path: Path) -> None:
    """A file whose source-frame masses were multiplied by 1 + z once too often."""
    write_injection_set(tmp_path / "set.h5", sample_set())
    with h5py.File(tmp_path / "set.h5", "a") as f:
        z = f["parameters/redshift"][:]
        f["parameters/mass_1"][:] = f["parameters/mass_1"][:] * (1 + z)
    with pytest.raises(DataError, match=r"set\.h5: column 'parameters/mass_1_detector' is not "
                       r"mass_1 \(1 \+ redshift\)") as caught:
        read_injection_set(tmp_path / "set.h5")
    documented("injection-detector-masses-disagree", str(caught.value),
               {tmp_path / "set.h5": "F"}, exit_code=exit_code(DataError))


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    write_injection_set(tmp_path / "set.h5", sample_set())
    with h5py.File(tmp_path / "set.h5", "a") as f:
        del f["parameters/dec"]
    with pytest.raises(DataError, match=r"set\.h5.*'parameters/dec'") as caught:
        read_injection_set(tmp_path / "set.h5")
    documented("injection-missing-column", str(caught.value), {tmp_path / "set.h5": "F"},
               exit_code=exit_code(DataError))


@pytest.mark.parametrize("layout", ["offline-iaas", "aframe"])
def test_a_column_that_is_not_one_number_per_injection_is_named(tmp_path: Path,
                                                                layout: str) -> None:
    path = tmp_path / "set.h5"
    write_injection_set(path, sample_set(), layout=layout)
    assert len(read_injection_set(path).binaries) == len(sample_set().binaries)  # control
    with h5py.File(path, "a") as f:
        count = len(f["parameters/ra"])
        del f["parameters/ra"]
        f["parameters/ra"] = np.array(["12h30m"] * count, dtype=object)
    with pytest.raises(DataError, match=r"set\.h5: column 'parameters/ra' holds text, not "):
        read_injection_set(path)
    with h5py.File(path, "a") as f:
        del f["parameters/ra"]
        f["parameters/ra"] = np.zeros((count, 2))
    with pytest.raises(DataError, match=rf"'parameters/ra' has shape \({count}, 2\)"):
        read_injection_set(path)


def test_bad_files_raise_one_clear_error(tmp_path: Path) -> None:
    refusals = {}
    with pytest.raises(ConfigError, match="must end in") as refusals["injection-suffix"]:
        read_injection_set(tmp_path / "set.txt")
    with pytest.raises(ConfigError, match="^injection file .*absent.h5 does not exist$"
                       ) as refusals["injection-not-found"]:
        read_injection_set(tmp_path / "absent.h5")
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(DataError, match="junk.h5") as refusals["injection-not-hdf5"]:
        read_injection_set(tmp_path / "junk.h5")
    (tmp_path / "junk.xml").write_text("<not ligolw")
    with pytest.raises(DataError, match="junk.xml") as refusals["injection-not-ligolw"]:
        read_injection_set(tmp_path / "junk.xml")
    write_injection_set(tmp_path / "nan.h5", sample_set())
    with h5py.File(tmp_path / "nan.h5", "a") as f:
        f["parameters/ra"][2] = np.nan
    with pytest.raises(DataError, match="'ra' is not finite in "
                       "row 2") as refusals["injection-not-finite"]:
        read_injection_set(tmp_path / "nan.h5")
    documented_refusals(refusals, {tmp_path: "<ws>"})
    with pytest.raises(ConfigError, match="layout 'aframe' is an HDF5 layout"):
        write_injection_set(tmp_path / "set.xml", sample_set(), layout="aframe")
    with pytest.raises(ConfigError, match="unknown injection file layout 'pycbc'"):
        write_injection_set(tmp_path / "set.h5", sample_set(), layout="pycbc")


def test_the_merge_counts_an_injection_set_with_its_volume(tmp_path: Path) -> None:
    original = sample_set()
    write_injection_set(tmp_path / "set.h5", original)
    found, volume = read_injection_list(tmp_path / "set.h5")
    assert volume == pytest.approx(original.attrs["time_volume_gpc3"])
    assert [i.gps_time for i in found] == [b.gps_time for b in original.binaries]
    assert [i.chirp_mass for i in found] == [b.chirp_mass for b in original.binaries]
    assert [i.distance_mpc for i in found] == [b.luminosity_distance for b in original.binaries]
    # the network SNR is the one against the measured PSD, not the design one
    np.testing.assert_allclose([i.network_snr for i in found],
                               np.hypot(original.snr["H1"], original.snr["L1"]))
    assert found[0].network_snr != pytest.approx(original.network_snr_design[0], rel=0.01)
    # LIGO_LW carries the population in process_params; aframe's layout in root attributes
    for name, layout in (("set.xml.gz", "offline-iaas"), ("aframe.h5", "aframe")):
        write_injection_set(tmp_path / name, original, layout=layout)
        assert read_injection_list(tmp_path / name)[1] == pytest.approx(volume)
    without = dataclasses.replace(original, attrs={})
    write_injection_set(tmp_path / "bare.xml", without)
    assert read_injection_list(tmp_path / "bare.xml")[1] is None


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offline_iaas.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_convert_injections_between_formats(tmp_path: Path) -> None:
    original = sample_set(3)
    write_injection_set(tmp_path / "set.xml.gz", original)
    done = cli("convert-injections", str(tmp_path / "set.xml.gz"), str(tmp_path / "a.hdf5"),
               "--layout", "aframe")
    assert done.returncode == 0, done.stderr
    assert hdf5_layout(tmp_path / "a.hdf5") == "aframe"
    assert cli("convert-injections", str(tmp_path / "a.hdf5"),
               str(tmp_path / "own.h5")).returncode == 0
    back = read_injection_set(tmp_path / "own.h5")
    assert_same_binaries(original, back, 2e-7,
                         ["gps_time", "luminosity_distance", "inclination", "ra", "dec",
                          "spin_1x", "spin_1z", "spin_2y", "spin_2z"])
    np.testing.assert_allclose([b.mass_1_detector for b in back.binaries],
                               [b.mass_1_detector for b in original.binaries], rtol=2e-7)
    assert back.snr.keys() == {"H1", "L1"} and back.reference_hz == 25.0


def test_convert_injections_refuses_an_ambiguous_file(tmp_path: Path) -> None:
    by_hand(tmp_path / "theirs.h5", approximant="IMRPhenomD", f_lower_hz=20.0)
    done = cli("convert-injections", str(tmp_path / "theirs.h5"), str(tmp_path / "out.xml"))
    assert done.returncode == 3
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"offline-iaas convert-injections: error: {tmp_path}/theirs.h5: "
                           "the frame of 'parameters/mass_1' is ambiguous")
    documented("injection-mass-frame-ambiguous", cli_error(done.stderr),
               {tmp_path / "theirs.h5": "F"}, exit_code=done.returncode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.h5"]  # nothing written


@pytest.mark.parametrize("name, layout", [("e.h5", "offline-iaas"), ("e.hdf5", "aframe"),
                                          ("e.xml", "offline-iaas")])
def test_an_empty_set_round_trips(tmp_path: Path, name: str, layout: str) -> None:
    """synth without injections writes an empty set; every format keeps its approximant."""
    empty = InjectionSet((), "IMRPhenomXPHM", 15.0, attrs={"time_volume_gpc3": 2.5})
    write_injection_set(tmp_path / name, empty, layout=layout)
    back = read_injection_set(tmp_path / name)
    assert (len(back), back.approximant, back.f_lower_hz) == (0, "IMRPhenomXPHM", 15.0)
    assert back.attrs["time_volume_gpc3"] == 2.5


DAMAGE_AT_BYTE = {
    8001: "Link iteration failed (unable to offset into local heap data block)",
    856: "Error iterating over attributes (bad version number for attribute message)",
    7728: "Unable to synchronously open object (message not aligned)",
    15024: "'utf-8' codec can't decode byte",
    897: "Insufficient precision in available types to represent",
    1034: "Unknown string encoding (value 14)",
}
"""Offsets into ``sample_set()`` as ``write_injection_set`` writes it (19280 bytes) where one
flipped byte damages a different part, and what HDF5 says of it: the local heap of link names
(h5py raised RuntimeError), an attribute message (RuntimeError), an object header (KeyError),
an attribute's text (UnicodeDecodeError), a float datatype (ValueError), a string datatype
(TypeError). A few other offsets crash or hang the HDF5 library itself: the next test."""


def test_a_byte_damaged_injection_file_is_named_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """convert-injections of a set with one byte flipped, at each of ``DAMAGE_AT_BYTE``: exit
    3, one line naming the file and what HDF5 says, the earlier target left as it was."""
    write_injection_set(tmp_path / "set.h5", sample_set())
    intact = (tmp_path / "set.h5").read_bytes()
    assert len(intact) == 19280  # the layout the offsets are of
    target = tmp_path / "out.xml"
    target.write_text("an earlier conversion, kept")
    damaged = tmp_path / "damaged.h5"
    for offset, says in DAMAGE_AT_BYTE.items():
        flipped = bytearray(intact)
        flipped[offset] ^= 0xFF
        damaged.write_bytes(flipped)
        code = main(["convert-injections", str(damaged), str(target), "--overwrite"])
        [line] = capsys.readouterr().err.strip().splitlines()
        assert code == 3, line
        assert line.startswith(f"offline-iaas convert-injections: error: {damaged}: not a "
                               "readable HDF5 file: "), line
        assert says in line, (offset, line)
        assert target.read_text() == "an earlier conversion, kept"
        if offset == 8001:
            documented("injection-damaged", cli_error(line), {damaged: "F"}, exit_code=code)
            # the merge's and check's reader says the same of it
            with pytest.raises(DataError, match=f"{damaged}: not a readable HDF5 file"):
                read_injection_list(damaged)


CRASHES_HDF5_AT_BYTE, HANGS_HDF5_AT_BYTE = 1033, 2496
"""Offsets into the same file where a flipped byte makes the HDF5 library itself crash
(SIGSEGV) or loop for ever as the file is read, found by flipping each byte in turn
(h5py 3.15, HDF5 1.14.6)."""


def test_a_byte_that_crashes_or_hangs_the_hdf5_library_is_named_not_a_dead_or_hung_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """convert-injections of a set whose flipped byte crashes the HDF5 library: exit 3, one
    line naming the file and the signal, the earlier target left as it was; a byte that makes
    the library loop: the reader is killed when its time runs out, one line naming the file,
    and nothing is left running."""
    write_injection_set(tmp_path / "set.h5", sample_set())
    intact = (tmp_path / "set.h5").read_bytes()
    assert len(intact) == 19280  # the layout the offsets are of
    damaged = tmp_path / "damaged.h5"
    flipped = bytearray(intact)
    flipped[CRASHES_HDF5_AT_BYTE] ^= 0xFF
    damaged.write_bytes(flipped)
    # the control: read in a process of its own, the file kills it
    alone = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from offline_iaas.search."
         "injection_file import _read_parameters; _read_parameters(Path(sys.argv[1]))",
         str(damaged)], capture_output=True, timeout=120)
    assert alone.returncode == -signal.SIGSEGV, alone.stderr
    target = tmp_path / "out.xml"
    target.write_text("an earlier conversion, kept")
    code = main(["convert-injections", str(damaged), str(target), "--overwrite"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 3, line
    documented("injection-crashes-hdf5", cli_error(line), {damaged: "F"}, exit_code=code)
    assert target.read_text() == "an earlier conversion, kept"
    # the reader restarted: the intact file reads after it
    assert len(read_injection_set(tmp_path / "set.h5")) == len(sample_set())

    flipped = bytearray(intact)
    flipped[HANGS_HDF5_AT_BYTE] ^= 0xFF
    damaged.write_bytes(flipped)
    frame_reader = GwfReader(timeout_seconds=60)
    try:
        # the control: this reader reads the intact file (started, and its imports done,
        # within a time that a loaded machine keeps), then gets 3 s for the damaged one
        _, datasets, _ = frame_reader.call(_read_parameters, tmp_path / "set.h5")
        assert len(datasets["mass_1"]) == len(sample_set())
        frame_reader.timeout_seconds = 3
        pid = frame_reader.pid
        assert pid is not None
        with pytest.raises(DataError) as caught:
            frame_reader.call(_read_parameters, damaged)
        documented("injection-hangs-hdf5", str(caught.value),
                   {damaged: "F", "after 3 s": "after 600 s"}, exit_code=3)
        assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    finally:
        frame_reader.close()


@pytest.mark.slow  # its reader spins a core until the alarm: 15 s and more of CPU
def test_a_reader_left_looping_in_the_hdf5_library_by_a_killed_command_ends_itself(
        tmp_path: Path) -> None:
    """A command killed (SIGKILL) while its reader loops on a damaged injection file: the
    library's loop holds the GIL, so the reader's orphan watch cannot run; the kernel ends it
    (its alarm: the command's time and ``ALARM_MARGIN_SECONDS``) instead of leaving it
    spinning. Without the alarm this reader spins for ever: the test fails. The command's
    time (15 s) leaves its reader time to start and spin on a loaded machine (with 2 s, two
    suites on two cores, its own timeout killed it first; 8 s left a margin of about 5 under
    three suites' load)."""
    timeout_seconds = 15
    write_injection_set(tmp_path / "set.h5", sample_set())
    flipped = bytearray((tmp_path / "set.h5").read_bytes())
    flipped[HANGS_HDF5_AT_BYTE] ^= 0xFF
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(flipped)
    command = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from offline_iaas.data."
         "gwf_reader import GwfReader; from offline_iaas.search.injection_file import "
         f"_read_parameters; GwfReader(timeout_seconds={timeout_seconds}).call(_read_parameters, "
         "Path(sys.argv[1]))", str(damaged)])
    readers: set[int] = set()
    try:
        wait_for(lambda: bool(readers.update(descendants(command.pid)) or readers), 60,
                 "the command's reader")
        (reader_pid,) = readers
        # in the library's loop: the reader spins
        wait_for(lambda: cpu_seconds(reader_pid) >= 0.5, 60, "the reader to spin")
    finally:
        command.kill()
        command.wait()
    try:
        waited = wait_for(lambda: not any(alive(pid) for pid in readers), 90,
                          "the orphaned reader to end")
    finally:
        for pid in readers:  # nothing left behind, even when the check fails
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert waited <= timeout_seconds + ALARM_MARGIN_SECONDS + 30


@pytest.mark.parametrize(("case", "content"), [
    ("injection-list-not-a-list", "5"),
    ("injection-list-injections-not-a-list", '{"injections": 5}'),
    ("injection-list-object-without-injections", '{"producer": "run.json, say"}'),
    ("injection-list-time-not-finite", '[{"gps_time": NaN, "network_snr": 9.5}]'),
])
def test_a_json_injection_list_that_is_not_one_is_refused_naming_the_file(
        case: str, content: str, small_campaign_dir, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """check with search.injections a JSON file that is no list of injections (a number, an
    object without one, another JSON file) or lists one at a NaN time: exit 2, one line
    naming the file, not a TypeError nor 0 injections nor a time "outside the span"."""
    ws = small_campaign_dir(export=False)
    listed = tmp_path / "list.json"
    listed.write_text(content + "\n")
    code = main(["check", str(ws / "campaign.toml"), "--set", 'model.mode="bbhnet"',
                 "--set", f'search.injections="{listed}"'])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, line
    assert line.startswith(f"offline-iaas check: error: search.injections: {listed}: "), line
    documented(case, cli_error(line), {listed: "F"}, exit_code=code)
    # the control: a list of one injection is read, and synth.json as synth wrote it
    listed.write_text(json.dumps([{"gps_time": 1262304010.5, "network_snr": 9.5}]))
    assert [i.gps_time for i in read_injection_list(listed)[0]] == [1262304010.5]
    assert read_injection_list(ws / "frames" / "synth.json")[0]


def test_a_json_injection_with_a_value_that_is_no_number_names_the_key_and_value(
        tmp_path: Path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"gps_time": "soon", "network_snr": 5}]))
    with pytest.raises(ConfigError) as caught:
        read_injection_list(listed)
    assert str(caught.value) == (f"search.injections: {listed}: injection 0 has gps_time "
                                 "'soon', not a number")
    listed.write_text(json.dumps([{"gps_time": 1262304010.5, "network_snr": [5]}]))
    with pytest.raises(ConfigError, match=r"has network_snr \[5\], not a number"):
        read_injection_list(listed)
    listed.write_text(json.dumps([{"network_snr": 5}]))  # a key absent: as before
    with pytest.raises(ConfigError, match="an injection without gps_time and network_snr"):
        read_injection_list(listed)
