import json
import re
from pathlib import Path

import pytest

import offline_iaas
from offline_iaas.cli import main
from offline_iaas.config import MERGE_ONLY, load_config, write_config
from offline_iaas.config_checks import parse_override
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.mode_packages import mode_package
from offline_iaas.modes import BUILT_IN_MODES
from tests.error_catalogue import cli_error, documented
from tests.helpers import WITNESSES


def test_loads_with_defaults_and_resolves_paths(small_config_file: Path) -> None:
    config = load_config(small_config_file)
    assert config.data.frames == small_config_file.parent / "frames"
    assert config.stride_samples == 64
    assert config.kernel_samples == 256
    assert config.warmup_windows == 3
    assert config.total_windows == 256
    assert config.server.runtime == "native"


def test_overrides_are_parsed_as_toml(small_config_file: Path) -> None:
    config = load_config(
        small_config_file,
        ["layout.servers=3", "model.kernel_seconds=2", 'data.channels=["H1:A"]', "model.name=x"],
    )
    assert config.layout.servers == 3
    assert config.model.kernel_seconds == 2.0
    assert config.data.channels == ("H1:A",)
    assert config.model.name == "x"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.colour=1", "unknown key 'data.colour'"),
        ("layout.servers=0", "'layout.servers' must be at least 1"),
        ("data.duration=-4", "'data.duration' must not be negative, got -4"),
        ("data.duration=0", "'data.duration' must be positive, got 0"),
        ("data.start=1e300", "'data.start' must be a GPS time in [0, 1e+10) s, got 1e+300"),
        ("data.start=-1", "'data.start' must not be negative, got -1"),
        ("data.duration=61.6", "must be a whole number of samples"),
        ("model.batch_size=1.5", "'model.batch_size' must be an integer"),
        ("model.inference_rate=3", "'model.inference_rate' (3.0 Hz) must divide"),
        ("model.kernel_seconds=0.125", "must not be shorter than the stride"),
        ("model.kernel_seconds=0.1", "must be a positive whole number of samples"),
        ('data.channels=["H1"]', "not of the form IFO:NAME"),
        ('data.channels=[":GDS-CALIB_STRAIN"]', "entry ':GDS-CALIB_STRAIN' is not of the form"),
        ('data.channels=["H1:"]', "entry 'H1:' is not of the form IFO:NAME"),
        ("data.start=2020-01-01T00:00:00",
         "'data.start' must be a number, got the date/time 2020-01-01T00:00:00"),
        ("nosuch.key=1", "unknown section [nosuch]"),
        ("servers=2", "not of the form section.key=value"),
        ('data.datafind_server="http://127.0.0.1:1"', "or data.datafind_server must be set"),
        ('data.frametypes=[""]', "'data.frametypes' must be a list of non-empty strings"),
        ("data.frametypes=[1]", "'data.frametypes' must be a list of non-empty strings"),
    ],
)
def test_bad_values_name_the_key_and_file(
    small_config_file: Path, override: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(small_config_file, [override])
    assert message in str(err.value)
    if "section.key" not in message:
        assert str(small_config_file) in str(err.value)


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[data\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_a_config_saved_with_a_byte_order_mark_loads_as_without(
        small_config_file: Path, tmp_path: Path) -> None:
    marked = tmp_path / "campaign.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + small_config_file.read_bytes())
    assert load_config(marked).to_dict() == load_config(small_config_file).to_dict()


def test_written_config_reloads_identically(small_config_file: Path, tmp_path: Path) -> None:
    config = load_config(small_config_file, ["layout.servers=2"])
    out = tmp_path / "sub" / "resolved.toml"
    out.parent.mkdir()
    write_config(config, out)
    again = load_config(out)
    assert again.to_dict() == config.to_dict()
    assert again.stream_hash() == config.stream_hash()
    assert again.merge_hash() == config.merge_hash()


@pytest.mark.parametrize("override", [
    "client.request_timeout_seconds=30", "client.in_flight=2", "server.instances=3",
    "server.memory=\"64GB\"", "workflow.retries=5", "site.accounting_group=\"ligo.dev\"",
])
def test_the_hashes_keep_parts_and_merges_valid_when_only_how_jobs_run_changes(
    small_config_file: Path, override: str
) -> None:
    changed, base = load_config(small_config_file, [override]), load_config(small_config_file)
    assert changed.stream_hash() == base.stream_hash()
    assert changed.merge_hash() == base.merge_hash()


@pytest.mark.parametrize("override", [
    "model.batch_size=5", "model.seed=7", "layout.servers=3", "data.duration=1024",
    "search.slides=2", "search.whitening=\"rolling\"", "synth.seed=5",
])
def test_both_hashes_change_with_what_the_parts_depend_on(
    small_config_file: Path, override: str
) -> None:
    bbhnet = 'model.mode="bbhnet"'  # a mode that serves every key above
    changed = load_config(small_config_file, [bbhnet, override])
    base = load_config(small_config_file, [bbhnet])
    assert changed.stream_hash() != base.stream_hash()
    assert changed.merge_hash() != base.merge_hash()


@pytest.mark.parametrize("override", [
    "deepclean.band_low_hz=50.0", "deepclean.gate=\"replace\"", "deepclean.frame_seconds=32.0",
    "search.cluster_seconds=2.0", 'search.injections="other.json"', "search.found_seconds=0.5",
    "search.ifar_threshold_years=10.0", "merge.shard_seconds=128.0",
])
def test_a_merge_only_setting_changes_the_merge_hash_only(
    small_config_file: Path, override: str
) -> None:
    # DeepClean's keys are its package's section's: in a mode that has it
    mode = ['model.mode="e2e"', f"data.witnesses={WITNESSES}"] if "deepclean" in override else []
    changed = load_config(small_config_file, [*mode, override])
    base = load_config(small_config_file, mode)
    assert changed.stream_hash() == base.stream_hash()
    assert changed.merge_hash() != base.merge_hash()


STREAM_PACKAGES = ("client", "repository", "serve", "rendezvous")
"""What a client and the served model run (with the base modules they use)."""


def test_no_client_or_served_model_reads_a_merge_only_setting() -> None:
    """``config.MERGE_ONLY`` is outside the clients' hash: no code a part depends on may read
    it (every ``.key`` of the client, serving and repository packages, and of
    ``stretches.py`` and ``data/frames.py``)."""
    package = Path(offline_iaas.__file__).parent
    sources = [p for name in STREAM_PACKAGES for p in (package / name).rglob("*.py")]
    sources += [package / "stretches.py", package / "data" / "frames.py"]
    text = "\n".join(p.read_text() for p in sources)
    packages = [mode_package(mode) for mode in BUILT_IN_MODES]
    merge_only = [*MERGE_ONLY, *((p.config_section_name, key) for p in packages if p is not None
                                 for key in p.merge_only)]
    assert ("deepclean", "band_low_hz") in merge_only  # the packages' too
    read = sorted(f"{section}.{key}" for section, key in merge_only
                  if re.search(rf"\.{key}\b", text))
    assert read == []
    # the control: a key the served model reads is found
    assert re.search(r"\.slides\b", text)


def test_parse_override_keeps_plain_strings() -> None:
    assert parse_override("data.frames=/a/b c") == ("data", "frames", "/a/b c")


def test_mode_needs_witnesses_of_every_detector(small_config_file: Path) -> None:
    deepclean = ['model.mode="deepclean"']
    with pytest.raises(ConfigError, match=r"'data.witnesses' has no witness channel of L1 "
                       r"\(mode 'deepclean' runs a DeepClean per interferometer\)") as caught:
        load_config(small_config_file, [*deepclean, 'data.witnesses=["H1:PEM-X"]'])
    documented("witnesses-of-a-detector-missing", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    with pytest.raises(ConfigError, match="'model.mode' must be one of classifier, deepclean"):
        load_config(small_config_file, ['model.mode="clean"'])
    with pytest.raises(ConfigError, match="names interferometer V1"):
        load_config(small_config_file,
                    [*deepclean, 'data.witnesses=["H1:A", "L1:B", "V1:C"]'])
    config = load_config(small_config_file, [*deepclean, 'data.witnesses=["H1:A", "L1:B"]'])
    assert config.stream_channels == ("H1:A", "L1:B")
    assert config.warmup_windows == 2 * config.stage_warmup_windows


def test_on_bad_file_must_be_fail_or_gap(small_config_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"'data.on_bad_file' must be one of 'fail', 'gap', "
                       r"got 'skip'") as caught:
        load_config(small_config_file, ['data.on_bad_file="skip"'])
    documented("on-bad-file-value", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    fail = load_config(small_config_file)
    gap = load_config(small_config_file, ['data.on_bad_file="gap"'])
    assert (fail.data.on_bad_file, gap.data.on_bad_file) == ("fail", "gap")
    # what happens to a bad file changes no output that exists: the parts stay valid
    assert fail.stream_hash() == gap.stream_hash() and fail.merge_hash() == gap.merge_hash()
    assert fail.stream_hash() != load_config(small_config_file,
                                             ["data.sample_rate=128"]).stream_hash()


@pytest.mark.parametrize("key", ["data.channels", "data.witnesses"])
def test_a_channel_listed_twice_is_named(small_config_file: Path, key: str) -> None:
    twice = "H1:GDS-CALIB_STRAIN" if key == "data.channels" else "H1:PEM-SYNTH_WITNESS_0"
    listed = f'["{twice}", "{twice}"]'
    with pytest.raises(ConfigError, match=f"lists the channel '{twice}' twice"):
        load_config(small_config_file, [f"{key}={listed}"])


def test_a_start_off_the_sample_grid_is_refused_when_the_config_is_read(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """data.start = 1262304000.3 at 256 Hz passed ``check`` and ``make-dag``; every client then
    failed at its first read (its frames' samples not on the span's grid). Half a second, or
    one sample, after a whole second is on the grid."""
    before = sorted(small_config_file.parent.rglob("*"))
    for command, start in (("check", "1262304000.3"), ("make-dag", "1262304000.001")):
        out = ["--out", str(small_config_file.parent / "run")] if command == "make-dag" else []
        code = main([command, str(small_config_file), "--set", f"data.start={start}",
                     "--set", "data.duration=63", *out])
        [line] = capsys.readouterr().err.strip().splitlines()
        assert (code, "'data.start'" in line, start in line) == (2, True, True), line
        assert sorted(small_config_file.parent.rglob("*")) == before
        if command == "check":
            documented("data-start-off-sample-grid", cli_error(line),
                       {small_config_file: "<ws>/campaign.toml"}, exit_code=code)
    for start in (1262304000.5, 1262304000.00390625):
        config = load_config(small_config_file, [f"data.start={start}", "data.duration=63"])
        assert config.data.start == start


@pytest.mark.parametrize("name", ["../evil", "", "a\udc80", ".hidden", "-x", "a/b", "x" * 256])
def test_a_model_name_triton_does_not_take_is_refused_before_export_writes(
        name: str, small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """model.name is the served model's directory in the repository: '../evil' wrote outside
    it, '' into its root, a surrogate (bytes not UTF-8 on the command line) crashed. A name of
    letters, digits, '_', '-', '.' (the default, 'offline-iaas') is one."""
    before = sorted(small_config_file.parent.rglob("*"))
    code = main(["export", str(small_config_file), "--set", f"model.name={json.dumps(name)}"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert (code, "'model.name'" in line) == (2, True), line
    assert sorted(small_config_file.parent.rglob("*")) == before
    if name == "../evil":
        documented("model-name-not-a-triton-name", cli_error(line),
                   {small_config_file: "<ws>/campaign.toml"}, exit_code=code)
    for good in ("offline-iaas", "my_model-2.v1", "x" * 255):
        assert load_config(small_config_file, [f'model.name="{good}"']).model.name == good


def test_model_name_manifest_json_is_refused_as_the_repositorys_own_file(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The repository keeps its manifest beside the models' directories: a model named
    'manifest.json' was an OS error (exit 6, "Is a directory") once export had built the
    networks. Now one line naming model.name at load, exit 2, nothing written."""
    before = sorted(small_config_file.parent.rglob("*"))
    code = main(["export", str(small_config_file), "--set", 'model.name="manifest.json"'])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2, line
    documented("model-name-manifest", cli_error(line),
               {small_config_file: "<ws>/campaign.toml"}, exit_code=code)
    assert sorted(small_config_file.parent.rglob("*")) == before
    assert load_config(small_config_file, ['model.name="manifest.jsonx"']).model.name \
        == "manifest.jsonx"


def test_an_ensemble_named_as_one_of_its_steps_is_refused_before_export_writes(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --ensemble` writes each step as a model of its own beside the ensemble: an
    ensemble named 'snapshotter' was written over the snapshotter's config (exit 0, a
    repository Triton cannot serve). Now one line naming the steps, exit 2, nothing written;
    the fused model (the default) has no steps of its own and takes the name."""
    before = sorted(small_config_file.parent.rglob("*"))
    code = main(["export", str(small_config_file), "--ensemble",
                 "--set", 'model.name="snapshotter"'])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2, line
    documented("model-name-ensemble-step", cli_error(line), {}, exit_code=code)
    assert sorted(small_config_file.parent.rglob("*")) == before
