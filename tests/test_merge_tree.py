"""The merge as a tree: shard merges per ``merge.shard_seconds`` of GPS time under an index.

Pure parts first (which values a shard owns, what it reads, the band-pass and the clustering
of a part of a stretch), then a real campaign whose shards cut through a stretch, a gap and a
client boundary: its index must equal the in-process reference, the independent oracle, and
the single merge of the same parts, file for file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy import signal

from offline_iaas import records
from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError
from offline_iaas.job_specs import read_shard_job
from offline_iaas.merge.merge import merge
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.reference import run_reference
from offline_iaas.merge.tree import shard_extents, shard_merges
from offline_iaas.physics import PAD_SECONDS, cluster_indices, zero_phase_blocks
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import client_shares, make_stretches, output_x0
from offline_iaas.summaries import ShardSummary
from offline_iaas.workflow.dag import parse_dag
from tests.helpers import (
    SMALL_CAMPAIGN,
    WITNESSES,
    complete_merge,
    run_dag,
    untrained_weights,
)
from tests.oracle import read_series, run_problems

START = 1262304000
SEGMENTS = [(START, START + 30), (START + 34, START + 52), (START + 54, START + 64)]
SHARD_OVERRIDES = ["merge.shard_seconds=16", "deepclean.frame_seconds=8"]


def _config(tmp_path: Path, overrides: list[str]):
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    return load_config(tmp_path / "campaign.toml", [
        'model.mode="e2e"', f"data.witnesses={WITNESSES}", "layout.servers=2",
        "layout.clients_per_server=2", *overrides])


# ---- pure: what each shard owns and reads -----------------------------------------------------
@pytest.mark.parametrize(("mode", "starts"), [
    ("e2e", [0, 16, 32, 48]),
    # a window is stamped with its end: the classifier's last stamp is the span's end, GPS 64
    ("classifier", [0, 16, 32, 48, 64]),
])
def test_shards_own_every_value_once_inside_their_interval(tmp_path: Path, mode: str,
                                                           starts: list[int]) -> None:
    # the classifier writes no frame files: it has no deepclean.frame_seconds
    overrides = SHARD_OVERRIDES if mode == "e2e" else SHARD_OVERRIDES[:1]
    config = _config(tmp_path, [*overrides, f'model.mode="{mode}"'])
    stretches = make_stretches(config.geometry, SEGMENTS)
    shares = client_shares(config, stretches)
    shards = shard_merges(config, stretches, shares)
    assert [c.gps_start - START for c in shards] == starts
    rate, dx = config.data.sample_rate, config.stride_seconds
    for stretch in stretches:
        kept = stretch.kept_windows(config.geometry)
        statistic, samples = [], []
        for c in shards:
            for e in shard_extents(config, stretches, c.gps_start, c.gps_end):
                if e.stretch != stretch:
                    continue
                a, b = e.statistic_rows
                times = output_x0(config.geometry, stretch, "statistic") + np.arange(a, b) * dx
                assert np.all((times >= c.gps_start) & (times < c.gps_end))
                a, b = e.samples
                times = output_x0(config.geometry, stretch, "noise") + np.arange(a, b) / rate
                assert np.all((times >= c.gps_start) & (times < c.gps_end))
                statistic.append(e.statistic_rows)
                samples.append(e.samples)
        # the shards' pieces tile the stretch, in order
        assert [lo for lo, _ in statistic] == [0] + [hi for _, hi in statistic][:-1]
        assert statistic[-1][1] == kept
        assert [lo for lo, _ in samples] == [0] + [hi for _, hi in samples][:-1]
        if mode == "e2e":
            assert samples[-1][1] == kept * config.stride_samples


def test_a_shard_reads_the_clients_of_its_interval_and_its_padding_only(tmp_path: Path) -> None:
    config = _config(tmp_path, SHARD_OVERRIDES)
    stretches = make_stretches(config.geometry, SEGMENTS)
    shares = client_shares(config, stretches)
    shards = shard_merges(config, stretches, shares)
    # the band-pass reads the 64 s blocks holding a shard's samples and 16 s more: with 64 s of
    # data every shard reads the whole of each stretch it touches
    pad = 64 + PAD_SECONDS
    for c in shards:
        owning = {s.node for s in shares for p in s.pieces
                  if p.gps_end > c.gps_start and p.gps_start < c.gps_end}
        near = {s.node for s in shares for p in s.pieces
                if p.gps_end > c.gps_start - pad and p.gps_start < c.gps_end + pad}
        assert owning <= set(c.clients) <= near
    assert any(len(c.clients) >= 2 for c in shards)  # a client boundary inside a shard


def test_bbhnet_shards_read_only_the_clustering_reach(tmp_path: Path) -> None:
    config = _config(tmp_path, ['model.mode="bbhnet"', "merge.shard_seconds=16",
                                "layout.clients_per_server=4", "search.cluster_seconds=1"])
    stretches = make_stretches(config.geometry, SEGMENTS)
    shards = shard_merges(config, stretches, client_shares(config, stretches))
    first = shard_extents(config, stretches, shards[0].gps_start, shards[0].gps_end)[0]
    # half a second of windows at 4 Hz beyond the owned rows, not the DeepClean padding
    assert first.rows == (0, first.statistic_rows[1] + 2)
    assert len(shards[0].clients) < 8


def test_merge_shard_seconds_must_hold_whole_frame_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="merge.shard_seconds.*multiple of deepclean"):
        _config(tmp_path, ["merge.shard_seconds=20", "deepclean.frame_seconds=8"])
    with pytest.raises(ConfigError, match="merge.shard_seconds"):
        _config(tmp_path, ["merge.shard_seconds=-16"])
    with pytest.raises(ConfigError, match="merge.shard_seconds.*whole number of seconds"):
        _config(tmp_path, ['model.mode="classifier"', "merge.shard_seconds=1.5"])


def test_a_stretch_of_more_shards_than_the_index_holds_is_refused(tmp_path: Path) -> None:
    # 64 s in shards of 1 s would be fine; a day in shards of 16 s is 5,400 of them
    config = _config(tmp_path, ['model.mode="classifier"', "merge.shard_seconds=16",
                                "data.duration=86400", "layout.clients_per_server=1"])
    stretches = make_stretches(config.geometry, [(START, START + 86400)])
    with pytest.raises(ConfigError, match="spans 5401 shards .* at least 44"):
        shard_merges(config, stretches, client_shares(config, stretches))


def test_shard_merges_are_a_dag_category_with_their_own_maxjobs(tmp_path: Path) -> None:
    from offline_iaas.workflow.dag_writer import dag_text

    config = _config(tmp_path, [*SHARD_OVERRIDES, "workflow.max_parallel_merges=2"])
    stretches = make_stretches(config.geometry, SEGMENTS)
    shares = client_shares(config, stretches)
    shards = shard_merges(config, stretches, shares)
    dag = parse_dag(dag_text(["server0", "server1"], shares, 2, 0,
                             shards=[(c.node, c.clients) for c in shards],
                             max_parallel_merges=config.workflow.max_parallel_merges))
    assert dag.maxjobs == {"merges": 2}
    assert {dag.nodes[c.node].category for c in shards} == {"merges"}


def test_a_shard_file_keeping_its_products_where_they_were_before_is_refused(
        tmp_path: Path) -> None:
    """A shard file with its triggers at its root (where an offline-iaas before the
    ``products`` group kept them) would read as no triggers: refused naming the file; the
    same file with them moved into ``products`` reads (the control)."""
    from types import SimpleNamespace

    from offline_iaas.errors import RunError
    from offline_iaas.merge.shard_merge import read_products

    path = tmp_path / "shard0.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("triggers", data=np.zeros(3, [("time", "f8"), ("statistic", "f4")]))
    record = SimpleNamespace(frame_files=(), frame_spans={})
    with pytest.raises(RunError, match=r"shard0\.h5: a shard merge's file of an offline-iaas "
                                       r"from before its products were kept in group"):
        read_products(path, record)
    with h5py.File(path, "a") as f:
        f.create_group("products")
        f.move("triggers", "products/triggers")
    assert len(read_products(path, record).arrays["triggers"]) == 3


def test_the_band_pass_of_a_part_of_a_stretch_equals_that_of_the_whole() -> None:
    rate = 256.0
    n = int(200 * rate)
    x = np.random.default_rng(3).normal(size=n)
    sos = signal.butter(4, [40, 80], btype="bandpass", fs=rate, output="sos")

    def read(lo: int, hi: int) -> np.ndarray:
        return x[lo:hi]

    whole = np.concatenate([v for _, v in zero_phase_blocks(read, n, sos, rate)])
    cuts = [0, 5000, 20011, 33000, n]
    parts = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        blocks = list(zero_phase_blocks(read, n, sos, rate, a, b))
        assert blocks[0][0] == a
        parts.append(np.concatenate([v for _, v in blocks]))
    joined = np.concatenate(parts)
    assert np.array_equal(joined, whole)
    assert not np.array_equal(np.roll(joined, 1), whole)  # negative control: one sample late


def test_clustering_a_part_with_its_reach_equals_clustering_the_whole() -> None:
    rng = np.random.default_rng(5)
    for trial in range(200):
        n, half = int(rng.integers(20, 300)), int(rng.integers(1, 9))
        # with plateaus of equal maxima half the time
        values = (rng.integers(0, 4, n) if trial % 2 else rng.normal(size=n)).astype(np.float32)
        expected = [i for i in range(n) if values[i] >= values[max(0, i - half): i + half + 1]
                    .max() and all(values[j] < values[i] for j in range(max(0, i - half), i))]
        assert list(cluster_indices(values, half)) == expected
        cut = int(rng.integers(1, n))
        found = []
        for a, b in ((0, cut), (cut, n)):
            lo, hi = max(0, a - half), min(n, b + half)
            keep = cluster_indices(values[lo:hi], half) + lo
            found += [i for i in keep if a <= i < b]
        assert found == expected


# ---- a real campaign -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """e2e with two time slides of 10 s over three science segments, shards of 16 s: the
    shard boundaries fall inside the first stretch (where its second slide is not formed yet),
    in the gap after it and inside the second (inside its first slide's formed windows); the
    second stretch forms only the first slide, the third none."""
    root = tmp_path_factory.mktemp("tree")
    segment_file = root / "science.txt"
    segment_file.write_text("".join(f"{a} {b}\n" for a, b in SEGMENTS))
    config = _config(root, [*SHARD_OVERRIDES, f'data.segments="{segment_file}"',
                            "synth.file_duration=8", "search.slides=2",
                            "search.slide_seconds=10",
                            f'model.repository="{root / "repository"}"',
                            f'search.injections="{root / "frames" / "synth.json"}"',
                            "search.ifar_threshold_years=1e-6"])
    write_synthetic_dataset(config)
    export_repository(config, untrained_weights(root / "weights"))
    run_dir = run_dag(config, root / "run")
    reference, _ = run_reference(config, root / "reference.h5")
    # the same parts merged by one node: the run directory without its shards
    single = root / "single"
    shutil.copytree(run_dir, single, ignore=shutil.ignore_patterns("output"))
    info = json.loads((single / "run.json").read_text())
    (single / "run.json").write_text(json.dumps({**info, "shards": []}))
    merge(RunDir(single))
    return config, run_dir, reference, single


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["classifier", "deepclean", "bbhnet"])
def test_sharded_campaigns_of_the_other_modes_equal_their_reference_and_the_oracle(
        tmp_path: Path, mode: str) -> None:
    """The other modes (e2e: the fixture above), on one server with two clients."""
    segment_file = tmp_path / "science.txt"
    segment_file.write_text("".join(f"{a} {b}\n" for a, b in SEGMENTS))
    config = _config(tmp_path, [*SHARD_OVERRIDES, f'model.mode="{mode}"', "layout.servers=1",
                                f'data.segments="{segment_file}"', "synth.file_duration=8",
                                f'model.repository="{tmp_path / "repository"}"'])
    write_synthetic_dataset(config)
    export_repository(config, None if mode == "classifier" else untrained_weights(
        tmp_path / "weights"))
    run_dir = run_dag(config, tmp_path / "run")
    assert len(json.loads((run_dir / "run.json").read_text())["shards"]) >= 4
    reference, _ = run_reference(config, tmp_path / "reference.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.passes(1e-5), comparison.describe()
    assert run_problems(run_dir) == []


@pytest.mark.slow
def test_the_dag_has_a_shard_merge_per_16_seconds_under_the_index(sharded) -> None:
    _, run_dir, _, _ = sharded
    dag = parse_dag((run_dir / "offline.dag").read_text())
    shards = [n for n in dag.nodes if n.startswith("shard")]
    assert shards == ["shard0", "shard1", "shard2", "shard3"]
    assert dag.nodes["merge"].parents == set(shards)
    for node in shards:
        spec = json.loads((run_dir / "jobs" / f"{node}.json").read_text())
        assert dag.nodes[node].parents == set(spec["clients"])
        assert dag.nodes[node].submit == "shard.sub"


@pytest.mark.slow
def test_the_sharded_campaign_equals_the_reference_and_the_oracle(sharded) -> None:
    _, run_dir, reference, _ = sharded
    index = run_dir / "output" / "campaign.h5"
    comparison = compare_outputs(index, reference)
    assert comparison.passes(1e-5), comparison.describe()
    assert run_problems(run_dir) == []
    late = read_series(index)
    late["statistic"] = [(x0, dx, np.roll(v, 1)) for x0, dx, v in late["statistic"]]
    assert run_problems(run_dir, series=late)  # negative control: one window late
    # slide k is formed from k x 10 s into each stretch: the 18 s one forms only the first
    # slide, the 10 s one none (NaN), and the background and FAR count only what they formed
    first, second, third = [v for _, _, v in read_series(index)["slides"]]
    assert np.isfinite(first).sum(axis=0).tolist() == [len(first) - 40, len(first) - 80]
    assert np.isfinite(second[:, 0]).sum() == len(second) - 40 and np.isnan(second[:, 1]).all()
    assert np.isnan(third).all()
    early = read_series(index)
    values = early["slides"][0][2]
    values[39, 0] = values[40, 0]  # control: slide 1 formed one window early
    assert run_problems(run_dir, series=early)


@pytest.mark.slow
def test_the_index_reads_as_the_single_merge_with_gwpy_and_read_campaign(sharded) -> None:
    from gwpy.timeseries import TimeSeries

    config, run_dir, _, single = sharded
    index, whole = run_dir / "output" / "campaign.h5", single / "output" / "campaign.h5"
    comparison = compare_outputs(index, whole)
    assert comparison.worst == 0.0, comparison.describe()
    for output in ("statistic", "clean/H1", "noise/L1"):
        ours, theirs = read_campaign(index, output), read_campaign(whole, output)
        assert len(ours) == len(theirs) == 3
        for a, b in zip(ours, theirs, strict=True):
            assert a.t0 == b.t0 and a.dt == b.dt and np.array_equal(a.value, b.value)
    with h5py.File(index, "r") as f:
        name = sorted(f["clean/H1"])[0]
        assert f[f"clean/H1/{name}"].external  # bytes in the shard files, not copied
    # gwpy's own reader, given the path as text
    ours = TimeSeries.read(str(index), format="hdf5", path=f"clean/H1/{name}")
    theirs = TimeSeries.read(str(whole), format="hdf5", path=f"clean/H1/{name}")
    assert ours.channel.name == theirs.channel.name and np.array_equal(ours.value, theirs.value)
    assert not np.array_equal(np.roll(ours.value, 1), theirs.value)
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())
    alone = json.loads((single / "output" / "campaign.json").read_text())
    for key in ("deepclean", "bbhnet", "deepclean_gate"):
        assert summary[key] == alone[key], key
    assert summary["shards"] == 4


@pytest.mark.slow
def test_the_shards_gwf_files_and_cache_are_the_single_merges(sharded) -> None:
    from gwpy.timeseries import TimeSeries

    config, run_dir, _, single = sharded
    ours, theirs = run_dir / "output" / "frames", single / "output" / "frames"
    names = sorted(p.relative_to(ours) for p in ours.rglob("*.gwf"))
    assert names == sorted(p.relative_to(theirs) for p in theirs.rglob("*.gwf"))
    assert len(names) >= 8
    channel = f"{config.data.channels[0]}_{config.mode_section.channel_suffix}"
    for name in names:
        if name.parts[0] == "H1":
            a = TimeSeries.read(str(ours / name), channel)
            b = TimeSeries.read(str(theirs / name), channel)
            assert np.array_equal(a.value, b.value) and a.t0 == b.t0
    cache = (ours / "deepclean.lcf").read_text()
    assert len(cache.splitlines()) == len(names)
    assert all(line.split("file://localhost")[1].startswith(str(ours))
               for line in cache.splitlines())
    assert cache.replace(str(ours), "") == (theirs / "deepclean.lcf").read_text().replace(
        str(theirs), "")
    for segments in ("H1_HOFT_DC_VALID.txt", "L1_HOFT_DC_FLAGGED.txt"):
        assert (ours / "segments" / segments).read_text() == (
            theirs / "segments" / segments).read_text()


@pytest.mark.slow
def test_a_moved_run_directory_fails_loudly_until_the_index_is_written_again(
        sharded, tmp_path: Path) -> None:
    _, run_dir, _, single = sharded
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)
    shutil.rmtree(run_dir / "output" / "shards.moved-away", ignore_errors=True)
    (run_dir / "output" / "shards").rename(run_dir / "output" / "shards.moved-away")
    try:
        with pytest.raises(OSError, match="external raw data file"):
            read_campaign(moved / "output" / "campaign.h5")
    finally:
        (run_dir / "output" / "shards.moved-away").rename(run_dir / "output" / "shards")
    merge(RunDir(moved))  # the index again, at the new place
    comparison = compare_outputs(moved / "output" / "campaign.h5",
                                 single / "output" / "campaign.h5")
    assert comparison.worst == 0.0, comparison.describe()


def test_make_dag_with_another_sharding_forgets_the_old_shards_outputs(
        tmp_path: Path, monkeypatch) -> None:
    from offline_iaas.workflow.make_dag import make_dag
    from tests.helpers import skip_data_check

    skip_data_check(monkeypatch)
    run = tmp_path / "run"
    make_dag(_config(tmp_path, SHARD_OVERRIDES), RunDir(run))
    shards = run / "output" / "shards"
    shards.mkdir()
    for node in ("shard0", "shard1", "shard2", "shard3"):  # as if merged
        spec = read_shard_job(RunDir(run), node)
        (shards / f"{node}.h5").write_bytes(b"")
        records.write(ShardSummary(
            complete=True, node=node, gps=(spec.gps_start, spec.gps_end),
            data_seconds=spec.data_seconds, clients=spec.clients, wall_seconds=1.0,
            peak_rss_mb=1.0, merge_hash="0" * 16, bytes=0, sha256=None, datasets=()),
            shards / f"{node}.json")
    complete_merge(RunDir(run))
    make_dag(_config(tmp_path, SHARD_OVERRIDES), RunDir(run))  # the same shards: kept
    assert len(list(shards.glob("*.json"))) == 4 and (run / "output" / "campaign.json").exists()
    resharded = _config(tmp_path, ["merge.shard_seconds=32", "deepclean.frame_seconds=8"])
    make_dag(resharded, RunDir(run))
    # shard0 and shard1 now cover [0, 32) and [32, 64): both redone, shard2-3 gone, and the index
    assert list(shards.iterdir()) == []
    assert not (run / "output" / "campaign.json").exists()
    assert sorted(p.stem for p in (run / "jobs").glob("shard*.json")) == ["shard0", "shard1"]


def test_a_merge_only_resharding_of_a_finished_run_removes_the_whole_merge_output(
        small_campaign_dir, caplog: pytest.LogCaptureFixture) -> None:
    """A finished run made again with other shards: its shard outputs and the index over them
    (campaign.h5 of external links, campaign.json, the report) go together, make-dag says
    so, the parts stay; merged again, the index reads whole."""
    from offline_iaas.cli import main
    from tests.bad_input_cases import fake_parts
    from tests.helpers import file_hashes

    ws = small_campaign_dir()
    run, toml = ws / "run", str(ws / "campaign.toml")

    def merged() -> None:
        for node in json.loads((run / "run.json").read_text())["shards"]:
            assert main(["merge-shard", "--run-dir", str(run), "--node", node]) == 0
        assert main(["merge", "--run-dir", str(run)]) == 0

    assert main(["make-dag", toml, "--out", str(run)]) == 0
    fake_parts(run)
    merged()
    parts = file_hashes(run / "parts")
    assert (run / "report" / "index.html").exists()
    caplog.clear()
    assert main(["make-dag", toml, "--set", "merge.shard_seconds=32", "--out", str(run)]) == 0
    said = caplog.text
    assert sorted(p.name for p in (run / "output").rglob("*")) == ["shards"]
    assert not (run / "report").exists()
    assert file_hashes(run / "parts") == parts
    assert ("removed the merge's output made for other shards (output/shards/shard0.json, "
            "output/shards/shard0.h5, output/shards/shard0.frames, output/campaign.json, "
            "output/campaign.h5, report); run-local or "
            "the DAG merges again, the parts are kept") in said, said
    merged()
    with h5py.File(run / "output" / "campaign.h5") as f:
        read = []
        f.visititems(lambda name, item: read.append(item[()]) if isinstance(
            item, h5py.Dataset) else None)
    assert read
