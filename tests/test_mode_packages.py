"""A science mode from outside the project (``mode_packages.py``): the fixture package
``tests/fixtures/power_mode`` installed by pip, as a user installs one, and a campaign run with
it end to end through the command line (export, make-dag, run-local, status, report,
reference), equal to its reference and right by its own definition, recomputed from the frames
with gwpy. The registry's refusals use packages installed as pip does (a ``dist-info`` with
``entry_points.txt`` on the path) without building them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas import mode_packages
from offline_iaas.config import load_config, write_config
from offline_iaas.errors import ConfigError, ModelError, exit_code
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.science.bbhnet import MODE as BBHNET_MODE
from offline_iaas.science.e2e import MODE as E2E_MODE
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, TOLERANCE, processes_mentioning

FIXTURE = Path(__file__).parent / "fixtures" / "power_mode"
OFFLINE_IAAS = Path(sys.executable).with_name("offline-iaas")


def _pip_install(source: Path, site: Path) -> Path:
    """``source`` (a copy: pip writes its build files beside it) installed into ``site`` by
    pip, offline and without its dependencies (offline-iaas is the one running it)."""
    copy = site.parent / f"{source.name}-source"
    shutil.copytree(source, copy)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(site), str(copy)],
                   check=True, capture_output=True, timeout=300)
    return site


def _registered(site: Path, distribution: str, entry_points: str, modules: dict[str, str]
                ) -> Path:
    """A distribution installed into ``site`` as pip lays one out (its modules, and a
    ``dist-info`` holding its metadata and ``entry_points.txt``), for the registry's refusals."""
    info = site / f"{distribution}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source)
    return site


@pytest.fixture
def on_path(monkeypatch):
    """Puts a site directory on this process's path (and forgets the packages found so far)."""
    def put(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setattr(mode_packages, "_FOUND", {})
        for name in [m for m in sys.modules if m.startswith("broken_mode")]:
            monkeypatch.delitem(sys.modules, name)

    return put


def test_a_mode_no_package_registers_is_refused_naming_the_entry_point_group(tmp_path):
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "campaign.toml", ['model.mode="power"'])
    documented("mode-not-installed", str(caught.value), {tmp_path: "<ws>"},
               exit_code=exit_code(ConfigError))
    assert "offline_iaas.modes" in str(caught.value)


def test_a_mode_package_asking_for_what_only_built_in_modes_have_is_refused(tmp_path, on_path):
    """A package whose mode asks for triggers (BBHnet's clustering and found/missed), or whose
    entry point names something else, or cannot be imported: one line naming the entry point
    and what is wrong; a well-formed one beside them loads (the control)."""
    mode = ("import dataclasses\n"
            "from offline_iaas.mode_packages import BuiltInParts, ModePackage\n"
            "from offline_iaas.modes import Mode\n"
            "def build(request): return []\n"
            "def package(**flags): return ModePackage(Mode('{name}', strain=True, "
            "witnesses=False, networks=('net',), outputs=('statistic',), streamable=False, "
            "**flags), {{'net': build}})\n"
            "def with_parts(**parts): return dataclasses.replace(package(), "
            "built_in=BuiltInParts(**parts))\n")
    site = _registered(tmp_path / "site", "broken-modes", (
        "[offline_iaas.modes]\n"
        "greedy = broken_mode_greedy:PACKAGE\n"
        "plain = broken_mode_plain:PACKAGE\n"
        "notapackage = broken_mode_greedy:build\n"
        "unimportable = broken_mode_missing:PACKAGE\n"
        "staged = broken_mode_staged:PACKAGE\n"
        "sectioned = broken_mode_sectioned:PACKAGE\n"
        "streamer = broken_mode_streamer:PACKAGE\n"
        "kinds = broken_mode_kinds:PACKAGE\n"
        "bbhnet = broken_mode_plain:PACKAGE\n"), {
        "broken_mode_greedy": mode.format(name="greedy") + "PACKAGE = package(triggers=True)\n",
        "broken_mode_plain": mode.format(name="plain") + "PACKAGE = package()\n",
        "broken_mode_staged": mode.format(name="staged") + (
            "PACKAGE = with_parts(stages=lambda config: [])\n"),
        "broken_mode_sectioned": mode.format(name="sectioned") + (
            "PACKAGE = with_parts(summary_sections={'bbhnet': dict}, summary_lines=list)\n"),
        "broken_mode_streamer": mode.format(name="streamer") + (
            "PACKAGE = with_parts(streamed={'net': None})\n"),
        "broken_mode_kinds": mode.format(name="kinds") + (
            "from offline_iaas.modes import NetworkKind\n"
            "KIND = NetworkKind('net', 'Net', 'ifos', False, 'statistic', fresh=print)\n"
            "PACKAGE = with_parts(network_kinds=(KIND,))\n")})
    on_path(site)
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    refusals = {}
    for name in ("greedy", "notapackage", "unimportable", "staged", "sectioned", "streamer",
                 "kinds"):
        with pytest.raises(ConfigError) as caught:
            load_config(tmp_path / "campaign.toml", [f'model.mode="{name}"'])
        refusals[name] = str(caught.value)
    documented("mode-package-asks-too-much", refusals["greedy"], {tmp_path: "<ws>"},
               exit_code=exit_code(ConfigError))
    assert "names a function, not an offline_iaas.mode_packages.ModePackage" in \
        refusals["notapackage"]
    assert "cannot be loaded: ModuleNotFoundError" in refusals["unimportable"]
    only_built_in = "parts only the built-in modes' packages have (built_in: "
    assert refusals["staged"].endswith(only_built_in + "stages)")
    assert refusals["sectioned"].endswith(only_built_in + "summary_sections, summary_lines)")
    assert refusals["streamer"].endswith(only_built_in + "streamed)")
    assert refusals["kinds"].endswith(only_built_in + "network_kinds)")
    assert "built_in" not in refusals["greedy"]  # control: a package without them
    assert "net" not in mode_packages.network_kinds()
    # another distribution's entry point named for a built-in mode is not taken
    assert mode_packages.mode_package("bbhnet").mode is BBHNET_MODE
    assert all(f"entry point {name!r} of offline_iaas.modes" in refusals[name]
               for name in refusals)
    config = load_config(tmp_path / "campaign.toml", ['model.mode="plain"'])
    assert config.mode.networks == ("net",) and not config.mode.streamable


SECTIONED_MODES = (
    "import dataclasses\n"
    "from offline_iaas.mode_packages import ModePackage\n"
    "from offline_iaas.modes import Mode\n"
    "@dataclasses.dataclass(frozen=True)\n"
    "class TunedConfig:\n"
    "    gain: float = 1.0\n"
    "    label: str = 'plain'\n"
    "@dataclasses.dataclass\n"
    "class LooseConfig:\n"
    "    gain: float = 1.0\n"
    "def build(request): return []\n"
    "def package(name, section): return ModePackage(Mode(name, strain=True, witnesses=False, "
    "networks=('net',), outputs=('statistic',), streamable=False), {'net': build}, "
    "config_section=section)\n"
    "PACKAGE = package('tuned', TunedConfig)\n"
    "LOOSE = package('loose', LooseConfig)\n"
    "MERGE = package('merge', TunedConfig)\n")


def test_a_mode_packages_own_config_section_is_read_checked_written_and_hashed(tmp_path,
                                                                               on_path):
    """A package's ``config_section`` is the campaign's ``[<mode>]``: its keys are read
    (``config.mode_section``), checked as the core's are (unknown key, wrong type, negative
    number: one line naming the key), written with the config and read back, and in both
    hashes; a campaign of another mode refuses the section, and a package whose section is
    not a frozen dataclass or is named like a core section is refused."""
    site = _registered(tmp_path / "site", "sectioned-modes", (
        "[offline_iaas.modes]\n"
        "tuned = broken_mode_tuned:PACKAGE\n"
        "loose = broken_mode_tuned:LOOSE\n"
        "merge = broken_mode_tuned:MERGE\n"), {"broken_mode_tuned": SECTIONED_MODES})
    on_path(site)
    toml = tmp_path / "campaign.toml"
    toml.write_text(SMALL_CAMPAIGN)
    tuned = ['model.mode="tuned"']
    default = load_config(toml, tuned)
    assert (default.mode_section.gain, default.mode_section.label) == (1.0, "plain")
    set_ = load_config(toml, [*tuned, "tuned.gain=2.5", 'tuned.label="loud"'])
    assert (set_.mode_section.gain, set_.mode_section.label) == (2.5, "loud")
    assert set_.stream_hash() != default.stream_hash()
    assert set_.merge_hash() != default.merge_hash()
    assert load_config(toml, [*tuned, "tuned.gain=1.0"]).stream_hash() == default.stream_hash()
    write_config(set_, tmp_path / "written.toml")
    assert "[tuned]\ngain = 2.5\n" in (tmp_path / "written.toml").read_text()
    again = load_config(tmp_path / "written.toml")
    assert again.mode_section == set_.mode_section
    assert again.stream_hash() == set_.stream_hash()

    refused = {
        "unknown key": ([*tuned, "tuned.gane=2"], "unknown key 'tuned.gane' (known in "
                                                   "[tuned]: gain, label)"),
        "type": ([*tuned, 'tuned.gain="x"'], "'tuned.gain' must be"),
        "negative": ([*tuned, "tuned.gain=-1"], "'tuned.gain' must not be negative"),
        "not finite": ([*tuned, "tuned.gain=nan"], "'tuned.gain' must be a finite number"),
        "other mode": (["tuned.gain=2"], "unknown section [tuned]"),
        "not frozen": (['model.mode="loose"'], "a config_section that is not a frozen "
                                                "dataclass"),
        "core name": (['model.mode="merge"'], "whose name [merge] is a section of "
                                               "offline-iaas itself"),
    }
    for case, (overrides, message) in refused.items():
        with pytest.raises(ConfigError) as caught:
            load_config(toml, overrides)
        assert message in str(caught.value), case
        assert str(toml) in str(caught.value) or "entry point" in str(caught.value), case


@pytest.mark.parametrize("mode", mode_packages.BUILT_IN_MODES)
def test_each_network_a_built_in_mode_streams_is_exported_by_its_own_package(mode):
    """``model.streamed`` exports each ``streamed`` stage's network by the mode package's
    ``StreamedExport`` (the core names no network): every one a built-in mode streams, the
    canary's included, has one."""
    from offline_iaas.demo import packaged_config
    from offline_iaas.network_streaming import served_as
    from offline_iaas.repository.pipeline import stages

    canary = ["deepclean.canary=true"] if "deepclean" in mode_packages.find_mode(
        mode).networks else []
    config = served_as(load_config(packaged_config(), [
        f'model.mode="{mode}"', "search.slides=0", *canary]), True)
    streamed = {stage.params["network"] for stage in stages(config) if stage.kind == "streamed"}
    exports = mode_packages.mode_package(mode).built_in.streamed
    assert streamed and streamed == set(exports)
    assert all(callable(export.export) and export.title for export in exports.values())


def test_each_network_users_bring_weights_for_is_its_own_packages():
    """``export --weights`` checks a weight file against a fresh network of its kind, which is
    the architecture of the package declaring the kind (the core holds none); every network a
    built-in mode serves with weights has a kind, and an unknown kind is one error naming the
    known ones."""
    from offline_iaas.models.weights import build_network

    kinds = mode_packages.network_kinds()
    assert list(kinds) == ["deepclean", "bbhnet"]
    expected = {"witnesses": 2, "ifos": 2, "kernel_samples": 256, "sample_rate_hz": 1024.0}
    for name, kind in kinds.items():
        owner = next(m for m in mode_packages.BUILT_IN_MODES
                     if kind in mode_packages.mode_package(m).built_in.network_kinds)
        network = build_network(name, expected)
        assert type(network).__module__ == f"offline_iaas.science.{owner}.network"
        assert kind.train_demo is not None and kind.title
    assert build_network("bbhnet", expected).whitening.shape[-1] == 257  # 0.25 s at 1024 Hz
    served = {n for m in mode_packages.BUILT_IN_MODES
              for n in mode_packages.find_mode(m).networks}
    assert served - set(kinds) == {"classifier", "subtract"}  # seeded and weightless
    with pytest.raises(ModelError, match=r"unknown network kind 'resnet' \(known: deepclean, "
                                         r"bbhnet\)"):
        mode_packages.network_kind("resnet")


def test_a_mode_package_is_served_on_whole_windows_and_streamed_true_is_refused(
        tmp_path, on_path):
    on_path(_pip_install(FIXTURE, tmp_path / "site"))
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", ['model.mode="power"'])
    from offline_iaas.network_streaming import streams
    from offline_iaas.repository.pipeline import stages

    assert not streams(config)
    assert [stage.kind for stage in stages(config)] == ["snapshot", "network"]
    with pytest.raises(ConfigError, match="'model.mode' the mode package of 'power' is served "
                       "on whole windows, and model.streamed = true"):
        load_config(tmp_path / "campaign.toml", ['model.mode="power"', "model.streamed=true"])


# ---- a campaign with an installed mode package, end to end ----------------------------------

def _power_by_definition(frames: Path, channels: list[str], ends: np.ndarray,
                         kernel_seconds: float, scale: float, shift_samples: int = 0
                         ) -> np.ndarray:
    """Each window's power from its definition (the fixture's docstring), the strain read from
    the frames by gwpy: ``sum_c mean((scale x_c)^2) / (c + 1)`` over ``[end - kernel, end)``;
    ``shift_samples`` moves every window (the negative control)."""
    from gwpy.timeseries import TimeSeries

    power = np.zeros(len(ends))
    for c, channel in enumerate(channels):  # each observatory's files: H-H1_..., L-L1_...
        files = [str(p) for p in sorted(frames.glob(f"{channel[0]}-*.gwf"))]
        series = TimeSeries.read(files, channel, format="gwf")
        rate, t0 = series.sample_rate.value, series.t0.value
        kernel = round(kernel_seconds * rate)
        x = series.value.astype(np.float64) * scale
        for i, end in enumerate(ends):
            stop = round((end - t0) * rate) + shift_samples
            power[i] += np.mean(x[stop - kernel : stop] ** 2) / (c + 1)
    return power


@pytest.mark.slow
def test_a_campaign_of_an_installed_mode_package_equals_its_reference_and_its_definition(
        small_campaign_dir, tmp_path):
    """pip installs the fixture package; export, make-dag, run-local, status, report and
    reference, each a fresh ``offline-iaas`` process finding the mode by its entry point, run
    a campaign of mode ``power`` (one server, two clients, shard merges and their index), its
    own setting (``[power] scale``) not the default. The
    output equals the reference; the statistic equals the power recomputed from the frames
    (and a window one sample late does not); the package's product (each stretch's loudest
    window) and its summary section and report section agree with that recomputation."""
    site = _pip_install(FIXTURE, tmp_path / "site")
    root = small_campaign_dir(export=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    scale = 2e21  # the package's own setting, [power] scale (its default is 1e21)
    mode = ["--set", 'model.mode="power"', "--set", f'model.repository="{tmp_path / "repo"}"',
            "--set", f"power.scale={scale:g}"]
    toml, run = str(root / "campaign.toml"), tmp_path / "run"

    def offline_iaas(*args: str) -> str:
        done = subprocess.run([str(OFFLINE_IAAS), *args], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{args[0]}: {done.stderr[-3000:]}"
        return done.stdout + done.stderr

    try:
        offline_iaas("export", toml, *mode)
        offline_iaas("make-dag", toml, *mode, "--out", str(run))
        offline_iaas("run-local", str(run))
        status = offline_iaas("status", str(run))
        offline_iaas("report", str(run))
        offline_iaas("reference", toml, *mode, "--out", str(tmp_path / "reference.h5"))
    finally:
        assert processes_mentioning(str(run)) == []
    campaign = run / "output" / "campaign.h5"
    assert "output/campaign.h5 (complete)" in status
    comparison = compare_outputs(campaign, tmp_path / "reference.h5")
    assert comparison.passes(TOLERANCE), comparison.describe()

    config = load_config(root / "campaign.toml")
    (statistic,) = read_campaign(campaign, "statistic")
    ends = statistic.times.value
    definition = _power_by_definition(root / "frames", list(config.data.channels), ends,
                                      config.model.kernel_seconds, scale)
    late = _power_by_definition(root / "frames", list(config.data.channels), ends,
                                config.model.kernel_seconds, scale, shift_samples=1)
    assert np.ptp(definition) > 0.1 * np.mean(definition)  # the power follows the data
    np.testing.assert_allclose(statistic.value, definition, rtol=TOLERANCE, equal_nan=False)
    assert not np.allclose(statistic.value, late, rtol=TOLERANCE)  # control: one sample late

    loudest = int(np.argmax(definition))
    with h5py.File(campaign, "r") as f:
        table = f["power/loudest"][()]
    assert table["time"].tolist() == [pytest.approx(ends[loudest], abs=1e-6)]
    np.testing.assert_allclose(table["power"], [definition[loudest]], rtol=TOLERANCE)
    section = json.loads((run / "output" / "campaign.json").read_text())["package_sections"]
    assert section["power"]["windows"] == len(ends)
    assert section["power"]["loudest_gps"] == pytest.approx(ends[loudest], abs=1e-6)
    report = (run / "report" / "index.html").read_text()
    assert "<h2>Power</h2>" in report
    assert f"{len(ends)} windows; the loudest has power" in report
    assert f"at GPS {ends[loudest]:.3f}" in report


def test_a_built_in_mode_without_its_entry_point_is_one_line_saying_reinstall(monkeypatch):
    """An install of offline-iaas without its entry points (a copied tree, a broken wheel):
    the built-in mode's package is not found, and the line says to install again; with the
    entry points (the control) the package is this project's own."""
    monkeypatch.setattr(mode_packages, "_FOUND", {})
    assert mode_packages.mode_package("e2e").mode is E2E_MODE
    monkeypatch.setattr(mode_packages, "_FOUND", {})
    monkeypatch.setattr(mode_packages.importlib.metadata, "entry_points", lambda **_: [])
    with pytest.raises(ConfigError) as caught:
        mode_packages.mode_package("e2e")
    documented("mode-entry-points-missing", str(caught.value), exit_code=exit_code(ConfigError))


HEAVY = ("scipy", "matplotlib", "h5py", "torch", "gwpy")
"""Libraries a built-in package's products, graphs and report import."""


def _heavy_after(statement: str) -> list[str]:
    code = (f"import sys\nfrom offline_iaas.summaries import summary_type\n{statement}\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=120)
    return result.stdout.split()


def test_reading_a_summary_loads_its_modes_types_not_their_products() -> None:
    """Reading ``campaign.json`` loads its mode's package for the sections' types (``status``
    does it): the package's graphs, products and report are imported when first called
    (``mode_packages.deferred``), so none of their libraries is loaded; calling one loads
    them (the control)."""
    assert _heavy_after("for mode in ('classifier', 'deepclean', 'bbhnet', 'e2e'):\n"
                        "    assert summary_type(mode).model_fields") == []
    called = ("from offline_iaas.mode_packages import mode_package\n"
              "from offline_iaas.summary_physics import physics_type\n"
              "assert mode_package('e2e').built_in.summary_lines(physics_type('e2e')()) == []")
    assert {"scipy", "h5py"} <= set(_heavy_after(called))
