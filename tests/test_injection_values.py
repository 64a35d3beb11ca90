"""An injection file whose values are not what they stand for: one line naming the file and the
column or attribute (exit code 3), whatever its format, and nothing written. Before, these were
tracebacks (a text frequency or count, an ``ifos`` that is a number, a spin magnitude
lalsimulation refuses, a negative distance made complex numbers) or were converted with exit
code 0 (a NaN spin read as 0, a negative mass, a NaN frequency, ``ifos`` a plain string read
letter by letter, a volume that is text). ``convert-injections`` onto its own source is refused
too (it wrote over the file it read, losing what the other format has no column for)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.cli import main
from offline_iaas.errors import DataError
from offline_iaas.search.injection_file import read_injection_set, write_injection_set
from tests.error_catalogue import cli_error, documented
from tests.injection_samples import sample_set


def _set_hdf5(path: str, value) -> Callable[[h5py.File], None]:
    def edit(f: h5py.File) -> None:
        if path.startswith("parameters/"):
            column = f[path][()].astype(np.float64)
            column[3] = value
            del f[path]
            f[path] = column
        else:
            f.attrs[path] = value
    return edit


HDF5_CASES = {  # (layout, edit, the message after the file's name)
    "mass negative": ("offline-iaas", _set_hdf5("parameters/mass_1", -5.0),
                      "column 'mass_1' must be positive, got -5 in row 3"),
    "spin above 1": ("offline-iaas", _set_hdf5("parameters/spin_1z", 1.5),
                     "the spin of body 1 (spin_1x, spin_1y, spin_1z) has magnitude 1.50748134 in "
                     "row 3, above 1"),
    "f_lower text": ("offline-iaas", _set_hdf5("f_lower_hz", "abc"),
                     "attribute 'f_lower_hz' must be a positive number, got 'abc'"),
    "f_lower NaN": ("offline-iaas", _set_hdf5("f_lower_hz", np.nan),
                    "attribute 'f_lower_hz' must be a positive number, got nan"),
    "ifos a string": ("offline-iaas", _set_hdf5("ifos", "H1"),
                      "attribute 'ifos' must be a list of detector names (H1, L1 ...), got 'H1'"),
    "volume text": ("offline-iaas", _set_hdf5("time_volume_gpc3", "lots"),
                    "attribute 'time_volume_gpc3' must be a positive number, got 'lots'"),
    "approximant bytes": ("offline-iaas", _set_hdf5("approximant", np.void(b"\xff\xfe")),
                          "attribute 'approximant' must be a waveform approximant's name, got "
                          "b'\\xff\\xfe'"),
    "aframe spin magnitude": ("aframe", _set_hdf5("parameters/a_1", 5.0),
                              "column 'a_1' (a spin's magnitude) must be in [0, 1], got 5 in "
                              "row 3"),
    "aframe length text": ("aframe", _set_hdf5("length", "many"),
                           "attribute 'length' must be a whole number, got 'many'"),
    "aframe redshift negative": ("aframe", _set_hdf5("parameters/redshift", -0.5),
                                 "column 'redshift' must not be negative, got -0.5 in row 3"),
}


def converted(source: Path, target: Path, capsys: pytest.CaptureFixture[str]
              ) -> tuple[int, str]:
    """``convert-injections``' exit code and its error's one line (replacing ``target``:
    the tests see that a refused source leaves it as it was)."""
    code = main(["convert-injections", str(source), str(target), "--overwrite"])
    err = capsys.readouterr().err.strip()
    assert code == 0 or len(err.splitlines()) == 1, err
    return code, cli_error(err) if code else ""


@pytest.mark.parametrize("case", HDF5_CASES)
def test_an_hdf5_injection_file_with_a_value_that_is_not_one_is_named(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    layout, edit, message = HDF5_CASES[case]
    source, target = tmp_path / "set.h5", tmp_path / "out.xml"
    write_injection_set(source, sample_set(), layout=layout)
    assert converted(source, target, capsys) == (0, "")  # control: the file as written
    before = target.read_bytes()
    with h5py.File(source, "a") as f:
        edit(f)
    assert converted(source, target, capsys) == (3, f"{source}: {message}")
    assert target.read_bytes() == before  # the earlier output kept
    if case == "mass negative":
        documented("injection-value-unphysical", f"{source}: {message}", {tmp_path: "<ws>"},
                   exit_code=3)
    if case == "f_lower text":
        documented("injection-attribute-not-a-number", f"{source}: {message}",
                   {tmp_path: "<ws>"}, exit_code=3)


def _ligolw_row(path: Path, edit: Callable) -> None:
    """Edit the first rows of ``path``'s sim_inspiral table (and process_params) with
    igwn-ligolw, LIGO_LW's own library."""
    from igwn_ligolw import lsctables
    from igwn_ligolw import utils as ligolw_utils

    document = ligolw_utils.load_filename(str(path))
    edit(lsctables.SimInspiralTable.get_table(document),
         lsctables.ProcessParamsTable.get_table(document))
    ligolw_utils.write_filename(document, str(path), with_mv=False)


def _param(name: str, value: str) -> Callable:
    def edit(_, params) -> None:
        [row] = [p for p in params
                 if p.param.removeprefix("--").replace("-", "_") == name]
        row.pyvalue = value
    return edit


def _cell(column: str, value) -> Callable:
    def edit(table, _) -> None:
        setattr(table[2], column, value)
    return edit


XML_CASES = {
    "spin NaN": (_cell("spin1z", float("nan")), "column 'spin1z' is not finite in row 2"),
    "distance negative": (_cell("distance", -100.0),
                          "column 'distance' must be positive, got -100 in row 2"),
    "nanoseconds beyond a second": (_cell("geocent_end_time_ns", 2_000_000_000),
                                    "column 'geocent_end_time_ns' must be in [0, 10**9) ns, "
                                    "got 2e+09 in row 2"),
    "SNR columns malformed": (_param("snr_columns", "H1alpha1"),
                              "process parameter 'snr_columns' must be IFO:column pairs "
                              "separated by commas, got 'H1alpha1'"),
    "reference frequency text": (_param("reference_frequency_hz", "abc"),
                                 "attribute 'reference_frequency_hz' must be a positive "
                                 "number, got 'abc'"),
}


@pytest.mark.parametrize("case", XML_CASES)
def test_a_ligolw_injection_file_with_a_value_that_is_not_one_is_named(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    edit, message = XML_CASES[case]
    source, target = tmp_path / "set.xml", tmp_path / "out.h5"
    write_injection_set(source, sample_set())
    assert converted(source, target, capsys) == (0, "")  # control: the file as written
    before = target.read_bytes()
    _ligolw_row(source, edit)
    assert converted(source, target, capsys) == (3, f"{source}: {message}")
    assert target.read_bytes() == before


def test_convert_injections_onto_its_own_source_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same file, or a link to it: refused before anything is read or written."""
    source = tmp_path / "set.h5"
    write_injection_set(source, sample_set())
    before = (source.read_bytes(), source.stat().st_mtime_ns)
    (tmp_path / "link.h5").symlink_to(source)
    for target in (source, tmp_path / "link.h5"):
        code = main(["convert-injections", str(source), str(target)])
        message = cli_error(capsys.readouterr().err)
        assert (code, message) == (2, f"{target}: is the source file {source} (converted "
                                      "files lose what the other format has no column for): "
                                      "give another target")
        assert (source.read_bytes(), source.stat().st_mtime_ns) == before
        assert os.path.islink(tmp_path / "link.h5")
    documented("convert-injections-onto-source", message, {tmp_path: "<ws>"}, exit_code=2)


def test_aframe_spins_of_magnitude_one_are_read(tmp_path: Path) -> None:
    """A maximal spin comes back from aframe's angles 1 + 4e-16 in some rows: the magnitude
    check lets rounding pass (it refused a_1 = 1 as "magnitude 1, above 1"); 1.01 is still
    refused (the control)."""
    from tests.test_injections_aframe import ROWS, aframe_file

    rows = {**ROWS, "a_1": [1.0, 1.0], "a_2": [1.0, 1.0]}
    rng = np.random.default_rng(3)
    rows.update({name: list(rng.uniform(0.1, 3.0, 2)) for name in ("tilt_1", "tilt_2",
                                                                   "phi_12", "phi_jl")})
    aframe_file(tmp_path / "waveforms.hdf5", rows)
    [spins] = [[(b.spin_1x ** 2 + b.spin_1y ** 2 + b.spin_1z ** 2) ** 0.5 for b in
                read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2",
                                   20.0).binaries]]
    assert spins == pytest.approx([1.0, 1.0], abs=1e-12)
    aframe_file(tmp_path / "waveforms.hdf5", {**rows, "a_1": [1.01, 1.0]})
    with pytest.raises(DataError, match=r"column 'a_1' \(a spin's magnitude\) must be in "):
        read_injection_set(tmp_path / "waveforms.hdf5", "IMRPhenomPv2", 20.0)


def test_aframe_population_attributes_that_are_not_numbers_are_named(tmp_path: Path) -> None:
    """aframe's files without a volume: redshift_max (which the docs ask users to set) as
    text was a ValueError traceback; the rejected draws' ifos as one string were read letter
    by letter, their length as text called a damaged HDF5 file, a NaN redshift dropped the
    volume. The good files (the control) give the volume."""
    from tests.test_injections_aframe import aframe_file, rejected_file

    waveforms, rejected = tmp_path / "waveforms.hdf5", tmp_path / "rejected-parameters.hdf5"
    aframe_file(waveforms)
    rejected_file(rejected, [0.1, 0.5, 0.3])
    assert read_injection_set(waveforms, "IMRPhenomPv2", 20.0).attrs["redshift_max"] == 0.5
    for target, name, value, message in [
            (waveforms, "redshift_max", "abc",
             f"{waveforms}: attribute 'redshift_max' must be a positive number, got 'abc'"),
            (rejected, "ifos", "H1", f"{rejected}: attribute 'ifos' must be a list of "
                                     "detector names (H1, L1 ...), got 'H1'"),
            (rejected, "length", "many",
             f"{rejected}: attribute 'length' must be a whole number, got 'many'")]:
        with h5py.File(target, "a") as f:
            kept = f.attrs.get(name)
            f.attrs[name] = value
        with pytest.raises(DataError) as refused:
            read_injection_set(waveforms, "IMRPhenomPv2", 20.0)
        assert str(refused.value) == message
        with h5py.File(target, "a") as f:
            if kept is None:
                del f.attrs[name]
            else:
                f.attrs[name] = kept
    rejected_file(rejected, [0.1, float("nan"), 0.3])
    with pytest.raises(DataError, match=r"column 'redshift' is not finite in row 1"):
        read_injection_set(waveforms, "IMRPhenomPv2", 20.0)


def test_a_sim_inspiral_f_lower_that_is_no_positive_number_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The column's own value in every row (0 there means unset, and the process parameter
    or the option stands in): -5 was taken as the set's f_lower with exit 0, NaN called
    "rows differ"."""
    source, target = tmp_path / "set.xml", tmp_path / "out.h5"
    for value, shown in ((-5.0, "-5.0"), (float("nan"), "nan")):
        write_injection_set(source, sample_set())

        def every_row(table, _, value: float = value) -> None:
            for row in table:
                row.f_lower = value

        _ligolw_row(source, every_row)
        assert converted(source, target, capsys) == (
            3, f"{source}: sim_inspiral column 'f_lower' must be a positive number, got "
               f"{shown}")
