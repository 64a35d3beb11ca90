"""Names changed by the glossary (#38). Config keys: an old key still sets the new field, with
one deprecation warning naming the file, the old key and the new one; both given is refused.
Run directories of before the rename are refused; ``merge-chunk`` is an alias of ``merge-shard``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from offline_iaas import records
from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, RunError, exit_code
from offline_iaas.science.deepclean.settings import DeepCleanConfig
from tests.error_catalogue import documented
from tests.helpers import WITNESSES

OLD_KEYS = [
    # (section, old key, new key, TOML value, the new field's value, overrides it needs)
    ("client", "chunk_seconds", "read_seconds", "32", 32.0, []),
    ("merge", "chunk_seconds", "shard_seconds", "0", 0.0, []),
    ("search", "time_shifts", "slides", "3", 3, ['model.mode="bbhnet"']),
    ("search", "shift_seconds", "slide_seconds", "0.5", 0.5, ['model.mode="bbhnet"']),
]


@pytest.mark.parametrize(("section", "old", "new", "text", "value", "extra"), OLD_KEYS,
                         ids=[f"{s}.{o}" for s, o, *_ in OLD_KEYS])
def test_an_old_key_sets_the_new_field_with_one_deprecation_warning(
        small_config_file: Path, log_lines: list[str], section: str, old: str, new: str,
        text: str, value: float, extra: list[str]) -> None:
    small_config_file.write_text(small_config_file.read_text() + f"\n[{section}]\n{old} = {text}\n")
    config = load_config(small_config_file, extra)
    assert getattr(getattr(config, section), new) == value
    warned = [line for line in log_lines if "deprecated" in line]
    assert warned == [f"{small_config_file}: {section}.{old} is deprecated: use {section}.{new}"]
    # --set with the old key: the same field, the same warning (saying it came from --set)
    log_lines.clear()
    fresh = small_config_file.with_name("fresh.toml")
    fresh.write_text(small_config_file.read_text().replace(f"{old} = {text}", ""))
    config = load_config(fresh, [*extra, f"{section}.{old}={text}"])
    assert getattr(getattr(config, section), new) == value
    assert [line for line in log_lines if "deprecated" in line] == [
        f"{fresh}: --set {section}.{old} is deprecated: use {section}.{new}"]
    # the new key: no warning
    log_lines.clear()
    load_config(fresh, [*extra, f"{section}.{new}={text}"])
    assert not [line for line in log_lines if "deprecated" in line]


def test_an_old_key_given_with_its_new_one_is_refused(small_config_file: Path) -> None:
    small_config_file.write_text(small_config_file.read_text()
                                 + "\n[client]\nchunk_seconds = 32\nread_seconds = 16\n")
    with pytest.raises(ConfigError) as caught:
        load_config(small_config_file)
    documented("renamed-key-both-given", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    fresh = small_config_file.with_name("fresh.toml")
    fresh.write_text(small_config_file.read_text().replace("chunk_seconds = 32\n", ""))
    with pytest.raises(ConfigError, match="'client.chunk_seconds' and 'client.read_seconds' are "
                       "both given"):
        load_config(fresh, ["client.chunk_seconds=32", "client.read_seconds=16"])


def test_renamed_keys_are_hashed_under_their_old_names(small_config_file: Path) -> None:
    """Finished parts and merges of a run directory written before the rename stay valid."""
    config = load_config(small_config_file, ['model.mode="bbhnet"', "search.slides=3",
                                             "merge.shard_seconds=0"])
    plain = config.to_dict()
    bbhnet = dict(plain.pop("search"))  # [bbhnet] before #43
    bbhnet["time_shifts"] = bbhnet.pop("slides")
    bbhnet["shift_seconds"] = bbhnet.pop("slide_seconds")
    merge = {"chunk_seconds": plain["merge"].pop("shard_seconds")}
    plain = {k: v for k, v in plain.items() if k in ("data", "model", "layout", "synth")}
    # [deepclean] was the core's before #43: every campaign hashed it, at its defaults
    plain["deepclean"] = dataclasses.asdict(DeepCleanConfig())
    plain["bbhnet"] = bbhnet
    plain["data"] = {k: v for k, v in plain["data"].items() if k != "on_bad_file"}
    # model.streamed came later (#42): off, it is not hashed either
    plain["model"] = {k: v for k, v in plain["model"].items() if k != "streamed"}
    old_style = {**plain, "merge": merge}
    digest = hashlib.sha256(json.dumps(old_style, sort_keys=True).encode()).hexdigest()[:16]
    assert config.merge_hash() == digest
    # the control: one more slide is another merge
    other = load_config(small_config_file, ['model.mode="bbhnet"', "search.slides=4",
                                            "merge.shard_seconds=0"])
    assert other.merge_hash() != digest


def test_the_old_bbhnet_section_reads_as_search_with_one_deprecation_warning(
        small_config_file: Path, log_lines: list[str]) -> None:
    """``[bbhnet]`` became ``[search]`` (#43): in the file or in ``--set``, the old name sets
    the same keys with one warning, hashes as before, and both names at once are refused."""
    text = small_config_file.read_text()
    mode = ['model.mode="bbhnet"']
    small_config_file.write_text(text + "\n[bbhnet]\nslides = 3\ncluster_seconds = 2.0\n")
    old = load_config(small_config_file, mode)
    assert (old.search.slides, old.search.cluster_seconds) == (3, 2.0)
    assert [line for line in log_lines if "deprecated" in line] == [
        f"{small_config_file}: [bbhnet] is deprecated: use [search] (the same keys)"]
    new_file = small_config_file.with_name("new.toml")
    new_file.write_text(text + "\n[search]\nslides = 3\ncluster_seconds = 2.0\n")
    log_lines.clear()
    new = load_config(new_file, mode)
    assert not [line for line in log_lines if "deprecated" in line]  # the new name: no warning
    assert (old.stream_hash(), old.merge_hash()) == (new.stream_hash(), new.merge_hash())
    assert old.search == new.search
    # the control: another value is another hash
    assert load_config(new_file, [*mode, "search.slides=4"]).stream_hash() != new.stream_hash()
    plain = small_config_file.with_name("plain.toml")
    plain.write_text(text)
    log_lines.clear()
    by_set = load_config(plain, [*mode, "bbhnet.slides=3", "bbhnet.cluster_seconds=2.0"])
    assert by_set.merge_hash() == new.merge_hash()
    assert [line for line in log_lines if "deprecated" in line] == [
        f"{plain}: --set bbhnet.slides is deprecated: use search.slides",
        f"{plain}: --set bbhnet.cluster_seconds is deprecated: use search.cluster_seconds"]
    log_lines.clear()
    assert load_config(plain, [*mode, "bbhnet.time_shifts=3"]).search.slides == 3
    assert [line for line in log_lines if "deprecated" in line] == [
        f"{plain}: --set bbhnet.time_shifts is deprecated: use search.slides"]
    both = small_config_file.with_name("both.toml")
    both.write_text(text + "\n[bbhnet]\nslides = 3\n\n[search]\ncluster_seconds = 2.0\n")
    with pytest.raises(ConfigError, match=r"\[bbhnet\] and \[search\] are both given: "
                       r"\[bbhnet\] is deprecated, keep only \[search\]"):
        load_config(both, mode)
    with pytest.raises(ConfigError, match="--set 'bbhnet.slides' and 'search.slides' are both"):
        load_config(plain, [*mode, "bbhnet.slides=3", "search.slides=3"])


def test_a_run_record_written_before_the_shard_rename_is_refused(tmp_path: Path) -> None:
    """Run directories of before the rename (nodes ``chunkK``) are not migrated: make-dag again."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": 2, "run_id": "r", "stream_hash": "s",
                                "merge_hash": "m", "sequence_base": 0, "servers": ["server0"],
                                "clients": ["client0"], "chunks": ["chunk0"], "created": "now"}))
    with pytest.raises(RunError) as caught:
        records.read(records.RunInfo, path)
    assert str(caught.value) == (
        f"{path}: field chunks: a run record (run.json) written before chunks was renamed "
        "shards (#38): run make-dag again into a new run directory")
    # the control: the same record under the new name is read
    path.write_text(path.read_text().replace('"chunks"', '"shards"').replace("chunk0", "shard0"))
    assert records.read(records.RunInfo, path).shards == ("shard0",)


def test_merge_chunk_is_a_deprecated_alias_of_merge_shard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    said = {}
    for command in ("merge-chunk", "merge-shard"):
        caplog.clear()
        code = main([command, "--run-dir", str(tmp_path / "nowhere"), "--node", "shard0"])
        err = capsys.readouterr().err.replace(command, "COMMAND")
        said[command] = (code, err, [r.getMessage() for r in caplog.records
                                     if "deprecated" in r.getMessage()])
    assert said["merge-chunk"][2] == [
        "offline-iaas merge-chunk is deprecated: use offline-iaas merge-shard"]
    assert said["merge-shard"][2] == []
    # the rest is merge-shard's: the same failure (no run directory there), the same exit code
    assert said["merge-chunk"][:2] == said["merge-shard"][:2]
    assert said["merge-shard"][0] == 6 and "not a run directory" in said["merge-shard"][1]


@pytest.mark.parametrize("key", ["search.time_shifts", "search.slides"])
def test_the_demo_in_a_mode_without_bbhnet_takes_the_slides_by_either_name(
        tmp_path: Path, log_lines: list[str], key: str) -> None:
    from offline_iaas.demo import demo_config

    # the demo sets search.slides = 0 itself in such a mode; the user's key is not a clash
    config = demo_config(tmp_path, None, [f"{key}=0"], mode="deepclean")
    assert config.search.slides == 0 and config.model.mode == "deepclean"
    warned = [line for line in log_lines if "deprecated" in line]
    assert len(warned) == (1 if key == "search.time_shifts" else 0), warned
    # the control: the user's own two names still clash
    with pytest.raises(ConfigError, match="are both given"):
        demo_config(tmp_path, None, ["search.time_shifts=0", "search.slides=0"],
                    mode="deepclean")


def test_deepclean_was_a_core_section_and_campaigns_of_other_modes_keep_their_hashes(
        small_config_file: Path, log_lines: list[str]) -> None:
    """``[deepclean]`` is DeepClean's package's since #43. A bbhnet campaign hashes it at its
    defaults then, as every campaign did (so run directories keep their parts); its
    ``campaign.toml`` written then, which holds the section at those defaults, reads without a
    word; a merge-only key that says another value is ignored with one warning, a canary
    asked of a mode without one refused."""
    text = small_config_file.read_text()
    mode = ['model.mode="bbhnet"']
    plain = load_config(small_config_file, mode)
    assert "deepclean" not in plain.to_dict() and plain.mode_section is None
    # the hash by its definition then: every section of the core, [deepclean] among them
    old = plain.to_dict()
    old = {k: v for k, v in old.items() if k in ("data", "model", "layout", "synth", "search")}
    old["data"].pop("on_bad_file")
    del old["model"]["streamed"]
    old["bbhnet"] = old.pop("search")
    old["bbhnet"]["time_shifts"] = old["bbhnet"].pop("slides")
    old["bbhnet"]["shift_seconds"] = old["bbhnet"].pop("slide_seconds")
    old["deepclean"] = {"band_low_hz": 55.0, "band_high_hz": 65.0, "filter_order": 8,
                        "frame_seconds": 64.0, "asd_fftlength": 4.0, "guard_hz": 2.0,
                        "channel_suffix": "DC", "frame_type": "HOFT_DC", "gate": "flag",
                        "gate_tolerance": 0.05, "gate_line_ratio": 1.0, "canary": False}
    digest = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    assert plain.v1_hash() == digest
    old["deepclean"]["band_low_hz"] = 54.0  # the control: another default is another hash
    assert plain.v1_hash() != hashlib.sha256(
        json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]

    written = "\n[deepclean]\n" + "".join(
        f"{key} = {json.dumps(value)}\n" for key, value in dataclasses.asdict(
            DeepCleanConfig()).items())  # as a run's campaign.toml said it before #43
    small_config_file.write_text(text + written)
    before = len(log_lines)
    kept = load_config(small_config_file, mode)
    assert (kept.stream_hash(), kept.merge_hash(), kept.v1_hash()) == (
        plain.stream_hash(), plain.merge_hash(), plain.v1_hash())
    assert log_lines[before:] == []
    ignored = load_config(small_config_file, [*mode, "deepclean.frame_seconds=8"])
    assert ignored.merge_hash() == plain.merge_hash()
    assert log_lines[before:] == [f"{small_config_file}: [deepclean] is not a section of mode "
                                  "'bbhnet' (deepclean.frame_seconds is set there): ignored"]
    with pytest.raises(ConfigError, match=r"'deepclean\.canary' is not a key of mode 'bbhnet'"):
        load_config(small_config_file, [*mode, "deepclean.canary=true"])  # nothing would serve it
    # in a mode that has it, the section is read: the same value is another merge
    e2e = ['model.mode="e2e"', f"data.witnesses={WITNESSES}"]
    assert load_config(small_config_file, [*e2e, "deepclean.frame_seconds=8"]).merge_hash() != \
        load_config(small_config_file, e2e).merge_hash()
