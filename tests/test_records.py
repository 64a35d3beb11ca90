"""The run directory's typed records (``records.py``) and the one definition of a complete node
(``completeness.py``), on records written by hand (no server)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from offline_iaas import records
from offline_iaas.completeness import Hashes, merge_problem, part_problem, shard_problem
from offline_iaas.config import config_from_dict, write_config
from offline_iaas.errors import RunError, exit_code
from offline_iaas.job_specs import ClientJob, ShardJob, write_client_job
from offline_iaas.records import BadFile, ClientShare, MergeShard, PartRecord, Piece, RunInfo
from offline_iaas.rundir import RunDir
from tests.error_catalogue import documented
from tests.helpers import complete_merge, complete_part

PIECE = Piece(0, 1 << 20 | 1, 0, 3, 64, 1e9, 1e9 + 16.25, 1e9, 1e9 + 64)
SEGMENT = ClientShare(index=0, node="client0", server="server0", pieces=(PIECE,))


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    """A run directory with a config and client0's job spec."""
    raw = {"data": {"frames": "f", "channels": ["H1:X"], "start": 1_000_000_000,
                    "duration": 64, "sample_rate": 256},
           "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4}}
    paths = RunDir(tmp_path / "run")
    paths.create()
    write_config(config_from_dict(raw, paths.config), paths.config)
    write_client_job(paths, SEGMENT)
    return paths


def hashes(run: RunDir) -> Hashes:
    from offline_iaas.config import load_config

    return Hashes.of(load_config(run.config))


# ---- reading and writing -----------------------------------------------------------------


def test_a_record_reads_back_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "client0.json"
    records.write(ClientJob.of(SEGMENT), path)
    assert records.read(ClientJob, path).share == SEGMENT
    assert json.loads(path.read_text())["schema_version"] == ClientJob.VERSION


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("server"), "field server: Field required"),
    (lambda d: d["pieces"][0].update(sequence_id="12"),
     "field pieces[0].sequence_id: Input should be a valid integer"),
    (lambda d: d["pieces"][0].update(gps_start=None),
     "field pieces[0].gps_start: Input should be a valid number"),
    (lambda d: d.update(surplus=1), "field surplus: Extra inputs are not permitted"),
    (lambda d: d.update(schema_version=3),
     "client job spec of schema version 3, newer than this offline-iaas reads (2)"),
    (lambda d: d.update(schema_version="2"), "field schema_version: '2' is not a version"),
])
def test_a_bad_record_is_one_run_error_naming_the_file_and_the_field(
    tmp_path: Path, change, message: str
) -> None:
    path = tmp_path / "jobs" / "client0.json"
    path.parent.mkdir()
    data = json.loads(ClientJob.of(SEGMENT).model_dump_json())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(RunError) as caught:
        records.read(ClientJob, path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    assert exit_code(RunError) == 6
    row = {"sequence_id": "record-bad-field", "version 3": "record-newer-schema"}
    for key, row_id in row.items():
        if key in message:
            documented(row_id, text, {tmp_path: "<ws>"}, exit_code=6)


def test_read_or_none_gives_none_for_a_missing_or_damaged_record(tmp_path: Path) -> None:
    path, problems = tmp_path / "run.json", []
    assert records.read_or_none(RunInfo, path, problems) is None
    assert problems == []  # missing: no problem, the caller says it is absent
    path.write_text('{"run_id": ')
    assert records.read_or_none(RunInfo, path) is None
    assert records.read_or_none(RunInfo, path, problems) is None
    assert len(problems) == 1 and problems[0].startswith(f"{path}: not a JSON document")


def test_a_missing_or_damaged_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with pytest.raises(RunError, match=f"{path} does not exist"):
        records.read(RunInfo, path)
    assert records.read_optional(RunInfo, path) is None
    with pytest.raises(RunError) as caught:
        records.read(RunInfo, path)
    documented("record-missing", str(caught.value), {tmp_path: "<ws>"}, exit_code=6)
    path.write_text('{"run_id": ')
    with pytest.raises(RunError, match=f"{path}: not a JSON document") as caught:
        records.read_optional(RunInfo, path)
    documented("record-not-json", str(caught.value), {tmp_path: "<ws>"}, exit_code=6)
    path.write_text("[1, 2]")
    with pytest.raises(RunError, match=f"{path}: not a JSON object"):
        records.read(RunInfo, path)


def test_version_1_records_are_read_without_their_unread_fields(tmp_path: Path) -> None:
    """Records without a schema version are today's layout before versions: job specs lose
    the fields nothing read, a hash becomes ``v1:<hash>``."""
    spec = {"index": 0, "node": "client0", "server": "server0",
            "pieces": [json.loads(ClientJob.of(SEGMENT).model_dump_json())["pieces"][0]],
            "run_dir": "/old/run", "config": "campaign.toml", "repository": "/r",
            "model": "offline-iaas", "config_hash": "0123456789abcdef"}
    path = tmp_path / "client0.json"
    path.write_text(json.dumps(spec))
    assert records.read(ClientJob, path).share == SEGMENT
    path.write_text(json.dumps({
        "run_id": "ab", "config_hash": "0123456789abcdef", "sequence_base": 1 << 20,
        "servers": ["server0"], "clients": ["client0"], "shards": [], "created": "2025",
        "training": {}, "model": {}, "bad_frame_files": [
            {"path": "/f.gwf", "gps_start": 1, "gps_end": 2, "error": "truncated"}]}))
    info = records.read(RunInfo, path)
    assert info.stream_hash == info.merge_hash == "v1:0123456789abcdef"
    assert info.model is None and info.bad_frame_files == (BadFile("/f.gwf", 1.0, 2.0,
                                                                   "truncated"),)


# ---- one definition of complete ------------------------------------------------------------


def test_a_part_is_complete_only_as_its_sidecar_describes_it(run: RunDir) -> None:
    h = hashes(run)
    assert str(part_problem(run, "client0", h)) == "part missing (no parts/client0.json)"
    assert not part_problem(run, "client0", h).written
    complete_part(run, "client0", b"0123456789")
    assert part_problem(run, "client0", h) is None
    assert part_problem(run, "client0", h, SEGMENT, verify=True) is None
    data, sidecar = run.part("client0")

    data.write_bytes(b"01234")
    assert str(part_problem(run, "client0", h)) == (
        "parts/client0.h5 truncated (5 of the 10 bytes its record says)")
    data.write_bytes(b"0123456780")  # the same size, another byte
    later = time.time_ns() + 10**9
    os.utime(data, ns=(later, later))  # written after its sidecar
    assert str(part_problem(run, "client0", h)) == (
        "parts/client0.h5 changed after it was written (checksum mismatch)")
    data.write_bytes(b"0123456789")
    assert part_problem(run, "client0", h) is None
    data.unlink()
    assert str(part_problem(run, "client0", h)) == "parts/client0.h5 missing"

    complete_part(run, "client0", b"0123456789")
    other = Hashes("f" * 16, h.merge, h.v1)
    assert str(part_problem(run, "client0", other)).startswith(
        "part from another campaign's config (stream hash ")
    moved = SEGMENT.model_copy(update={"server": "server1"})
    assert str(part_problem(run, "client0", h, moved)) == (
        "part covers other windows than its job spec")
    sidecar.write_text('{"complete": true}')  # what a sidecar alone used to be enough for
    assert str(part_problem(run, "client0", h)).startswith(f"sidecar unreadable: {sidecar}: ")


def test_the_checksum_is_read_when_asked_even_if_the_file_looks_untouched(run: RunDir) -> None:
    complete_part(run, "client0", b"0123456789")
    data, sidecar = run.part("client0")
    stamp = sidecar.stat().st_mtime_ns
    data.write_bytes(b"0123456780")
    os.utime(data, ns=(stamp - 10**9, stamp - 10**9))  # older than its sidecar
    h = hashes(run)
    assert part_problem(run, "client0", h) is None  # lazily: only size and time
    assert "checksum mismatch" in str(part_problem(run, "client0", h, verify=True))


def test_the_merge_and_shard_merges_are_complete_under_the_merge_hash(run: RunDir) -> None:
    h = hashes(run)
    assert str(merge_problem(run, h)) == "merge not done (no output/campaign.json)"
    complete_merge(run)
    assert merge_problem(run, h) is None
    edited = Hashes(h.stream, "e" * 16, h.v1)  # a merge-only setting changed
    assert str(merge_problem(run, edited)).startswith(
        "merge from another campaign's config (merge hash ")
    run.output[1].unlink()
    assert str(merge_problem(run, h)) == (
        "output/campaign.h5 without its record output/campaign.json (stopped before it "
        "finished)")
    shard = MergeShard(index=0, node="shard0", gps_start=1e9, gps_end=1e9 + 64,
                       clients=("client0",), data_seconds=64.0)
    records.write(ShardJob.of(shard), run.job("shard0"))
    assert str(shard_problem(run, "shard0", h, shard)) == (
        "shard merge not done (no output/shards/shard0.json)")


def test_a_version_1_part_counts_for_the_campaign_whose_v1_hash_it_carries(run: RunDir) -> None:
    complete_part(run, "client0", b"0123456789")
    data, sidecar = run.part("client0")
    record = json.loads(sidecar.read_text())
    h = hashes(run)
    for key in ("schema_version", "bytes", "stream_hash"):
        record.pop(key)
    record["config_hash"] = h.v1
    sidecar.write_text(json.dumps(record))
    assert records.read(PartRecord, sidecar).bytes is None
    assert part_problem(run, "client0", h) is None  # no size: the checksum is read
    data.write_bytes(b"0123456780")
    assert "checksum mismatch" in str(part_problem(run, "client0", h))
    record["config_hash"] = "0" * 16
    sidecar.write_text(json.dumps(record))
    assert "another campaign's config" in str(part_problem(run, "client0", h))


# ---- the servers' and clients' small documents -------------------------------------------


def test_claims_count_the_clients_streaming_to_each_server_and_a_damaged_one_is_named(
        run: RunDir) -> None:
    from offline_iaas.client.balance import claim, server_loads

    complete_part(run, SEGMENT.node)
    claim(run, "client0", "server1")
    assert server_loads(run, hashes(run)) == {}  # client0's part is complete: not a load
    run.part(SEGMENT.node)[0].unlink()
    assert server_loads(run, hashes(run)) == {"server1": 1}
    claim(run, "client0", "server0")  # moved
    assert server_loads(run, hashes(run)) == {"server0": 1}
    run.claim("client0").write_text('{"server": 3}')  # flipped, not a name
    with pytest.raises(RunError, match=r"client0\.claim: field server: Input should be a "
                       r"valid string \(a client's claim"):
        server_loads(run, hashes(run))
    run.claim("client0").write_text('{"server": "server1"}')  # an older claim: version 1
    assert server_loads(run, hashes(run)) == {"server1": 1}


def test_a_server_address_and_an_unhealthy_report_read_back_and_a_damaged_one_is_named(
        run: RunDir) -> None:
    from offline_iaas.rendezvous import addresses

    assert addresses.read_address(run, "server0") is None
    address = addresses.ServerAddress(node="server0", host="node17", grpc_port=8001,
                                      http_port=8000, metrics_port=8002, epoch=3, pid=42)
    addresses.publish_address(run, address)
    assert addresses.read_address(run, "server0") == address
    assert addresses.parse_address(addresses.address_text(address), Path("ad")) == address
    assert addresses.read_address(run, "server1") is None
    run.address("server0").write_text(run.address("server0").read_text().replace("8001", "x"))
    with pytest.raises(RunError, match=r"server0\.json: not a JSON document"):
        addresses.read_address(run, "server0")
    addresses.report_unhealthy(run, address, "client0")
    assert addresses.read_unhealthy(run, "server0") == addresses.UnhealthyReport(
        epoch=3, client="client0")
    run.unhealthy("server0").write_text('{"epoch": 3}')
    with pytest.raises(RunError, match=r"server0\.unhealthy: field client: Field required"):
        addresses.read_unhealthy(run, "server0")


def test_the_summarys_physics_reads_back_typed_and_a_renamed_field_is_named(
        tmp_path: Path) -> None:
    """``campaign.json``'s physics sections are types (``summary_physics``): read back by
    attribute, NaN kept as NaN, and a field renamed under them is one RunError naming it."""
    import math

    from offline_iaas.merge.postprocess import physics_lines
    from offline_iaas.summaries import CampaignSummary

    asd = {"fftlength": 4.0, "guard_hz": 2.0, "line_hz": 60.0, "ratio_at_line": 0.03,
           "max_ratio_in_band": math.nan, "min_ratio_outside_band": 0.99,
           "max_ratio_outside_band": 1.01, "max_deviation_outside_band": 0.01,
           "max_deviation_at_band_edges": 0.02, "held_out_gps": [1e9, 1e9 + 64],
           "training_gps": None}
    row = {"gps_time": 1e9 + 12.0, "network_snr": 20.0, "statistic": 7.5, "found": True,
           "in_training": False}
    fields = {"complete": True, "wall_seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mb": 1.0,
              "sha256": "ab" * 32, "bytes": 1, "stream_hash": "s", "merge_hash": "m",
              "mode": "e2e", "deepclean": {"H1": asd},
              "bbhnet": {"triggers": 3, "cluster_seconds": 1.0, "found": 1, "missed": 0,
                         "threshold": 5.0, "background_seconds": 50.0, "injections": [row]}}
    path = tmp_path / "campaign.json"
    records.write(records.build(CampaignSummary, fields), path)
    physics = records.read(CampaignSummary, path).physics
    assert physics.deepclean["H1"].ratio_at_line == 0.03
    assert math.isnan(physics.deepclean["H1"].max_ratio_in_band)
    assert physics.deepclean["H1"].held_out_gps == (1e9, 1e9 + 64)
    assert physics.bbhnet.injections[0].found and physics.bbhnet.sensitivity is None
    lines = physics_lines(physics)
    assert lines[0].startswith("DeepClean H1: cleaned/raw ASD 0.030 at the 60.00 Hz line")
    assert "BBHnet: 1 found, 0 missed of 1 held-out injections" in lines[2]
    data = json.loads(path.read_text())
    data["deepclean"]["H1"]["ratio_at_the_line"] = data["deepclean"]["H1"].pop("ratio_at_line")
    path.write_text(json.dumps(data))
    with pytest.raises(RunError) as caught:
        records.read(CampaignSummary, path)
    assert str(caught.value).startswith(
        f"{path}: field deepclean.H1.ratio_at_line: Field required (a campaign summary")
    data["deepclean"]["H1"]["ratio_at_line"] = 0.03  # control: only the renamed one is named
    del data["deepclean"]["H1"]["ratio_at_the_line"]
    path.write_text(json.dumps(data))
    again = records.read(CampaignSummary, path).physics
    assert again.model_dump_json() == physics.model_dump_json()  # NaN is never equal to itself


def test_a_summary_is_read_with_the_sections_of_its_own_mode(tmp_path: Path) -> None:
    """Each mode's package types its sections (``BuiltInParts.summary_sections``): a bbhnet
    campaign's summary with a DeepClean section is refused, naming the section; the same
    section under mode e2e (which cleans) reads."""
    from offline_iaas.summaries import CampaignSummary

    search = {"triggers": 3, "cluster_seconds": 1.0}
    gate = {"valid_seconds": 64.0, "flagged_seconds": 0.0, "files_flagged": 0, "files": 1}
    fields = {"complete": True, "wall_seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mb": 1.0,
              "sha256": "ab" * 32, "bytes": 1, "stream_hash": "s", "merge_hash": "m",
              "mode": "bbhnet", "bbhnet": search}
    path = tmp_path / "campaign.json"
    records.write(records.build(CampaignSummary, fields), path)
    assert records.read(CampaignSummary, path).physics.bbhnet.triggers == 3
    data = {**json.loads(path.read_text()), "deepclean_gate": {"H1": gate}}
    path.write_text(json.dumps(data))
    with pytest.raises(RunError, match=r"field deepclean_gate: Extra inputs are not permitted"):
        records.read(CampaignSummary, path)
    path.write_text(json.dumps({**data, "mode": "e2e"}))  # the control: e2e writes it
    assert records.read(CampaignSummary, path).physics.deepclean_gate["H1"].files == 1
