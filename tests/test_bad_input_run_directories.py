"""The bad-input catalogue (docs/errors.md), its run directories' cases (exit 6: a run of
another campaign, a DAG or job spec cut short or deleted, a node of another kind, parts missing
or damaged, an output that cannot be written) through the real command line, checked as
tests/test_bad_input.py checks its cases (``bad_input_cases.check_case``); and the make-dag
command that the message of a damaged or deleted job spec names, run as given."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.rundir import RunDir
from tests import bad_input_cases
from tests.bad_input_cases import Case, check_case, fake_parts, run_dir, write
from tests.error_catalogue import documented
from tests.helpers import file_hashes

base = bad_input_cases.base
"""The small campaign each case copies (its fixture)."""


def _hash(directory: Path, *overrides: str) -> str:
    """The stream hash of the campaign in ``directory`` (with ``--set`` overrides)."""
    return load_config(directory / "campaign.toml", list(overrides)).stream_hash()


def _other_campaign_run(ws: Path) -> list[str]:
    run_dir(ws)
    return ["make-dag", str(ws / "campaign.toml"), "--set", "model.seed=7", "--out",
            str(ws / "run")]


def _corrupt_part(ws: Path) -> list[str]:
    import h5py

    run = run_dir(ws)
    fake_parts(run)
    with h5py.File(run / "parts" / "client1.h5", "r+") as f:
        f["statistic/0"][5] = -1.0
    for name in ("shard0.h5", "shard0.json"):  # an earlier merge's, kept when this fails
        write(run / "output" / "shards" / name, f"earlier {name}")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _foreign_part(ws: Path) -> list[str]:
    run = run_dir(ws)
    fake_parts(run)
    other = run_dir(ws, "model.seed=7", name="other-run")  # same plan, other campaign
    fake_parts(other)
    for suffix in (".h5", ".json"):
        shutil.copy2(other / "parts" / f"client0{suffix}", run / "parts" / f"client0{suffix}")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _dag_cut_short(ws: Path) -> list[str]:
    """offline.dag cut on a line boundary before the merge node (a copy that stopped early)."""
    run = run_dir(ws)
    lines = (run / "offline.dag").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.startswith("JOB merge "))
    (run / "offline.dag").write_text("".join(lines[:cut]))
    return ["status", str(run)]


def _dag_emptied(ws: Path) -> list[str]:
    """offline.dag emptied (a copy that wrote nothing): it holds no node, so would run none."""
    run = run_dir(ws)
    (run / "offline.dag").write_text("")
    return ["run-local", str(run)]


def _dag_cut_in_its_header(ws: Path) -> list[str]:
    """offline.dag cut 30 bytes in, within make-dag's header line."""
    run = run_dir(ws)
    (run / "offline.dag").write_bytes((run / "offline.dag").read_bytes()[:30])
    return ["status", str(run)]


def _job_spec_damaged(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "shard0.json").write_text("{\n")
    return ["merge-shard", "--run-dir", str(run), "--node", "shard0"]


def _job_spec_deleted(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "client1.json").unlink()
    return ["client", "--run-dir", str(run), "--node", "client1"]


def _job_spec_not_text(ws: Path) -> list[str]:
    run = run_dir(ws)
    (run / "jobs" / "client0.json").write_bytes(b"\xff\xfe{")
    return ["client", "--run-dir", str(run), "--node", "client0"]


def _injections_into_a_directory(ws: Path) -> list[str]:
    (ws / "out.h5").mkdir()
    return ["convert-injections", str(ws / "frames" / "injections.h5"), str(ws / "out.h5")]


def _reference_into_a_directory(ws: Path) -> list[str]:
    (ws / "ref.h5").mkdir()  # named as an output is (reference --out refuses other suffixes)
    return ["reference", str(ws / "campaign.toml"), "--out", str(ws / "ref.h5")]


CASES: list[Case] = [
    # ---- run directories: exit 6 ----
    Case("run-directory-of-another-campaign", 6, _other_campaign_run,
         lambda ws: [f"{ws / 'run'} already holds the DAG of another campaign"],
         placeholders=lambda ws: {
             _hash(ws / "run"): "<hash of the run>",
             _hash(ws, "model.seed=7"): "<hash of this campaign>"}),
    Case("not-a-run-directory", 6, lambda ws: ["run-local", str(ws)],
         lambda ws: [f"{ws} holds no offline.dag"]),
    Case("dag-cut-short", 6, _dag_cut_short,
         lambda ws: [f"{ws / 'run' / 'offline.dag'} lacks node(s) merge, final"]),
    Case("dag-empty", 6, _dag_emptied, lambda ws: [
        f"{ws / 'run' / 'offline.dag'} lacks node(s) server0, client0, client1, shard0, merge"]),
    Case("dag-cut-in-its-header", 6, _dag_cut_in_its_header, lambda ws: [
        f"{ws / 'run' / 'offline.dag'} lacks node(s) server0, client0, client1, shard0, merge"]),
    Case("node-not-a-run-directory", 6,
         lambda ws: ["merge-shard", "--run-dir", str(ws / "runn"), "--node", "shard0"],
         lambda ws: [f"{ws / 'runn'} holds no offline.dag (not a run directory"]),
    Case("job-spec-damaged", 6, _job_spec_damaged,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'shard0.json'}: not a JSON document",
                     f"restore it with 'offline-iaas make-dag {ws / 'run' / 'campaign.toml'} "
                     f"--out {ws / 'run'}'"]),
    Case("job-spec-deleted", 6, _job_spec_deleted,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'client1.json'}: no job spec for node client1: "
                     "restore it with"]),
    Case("job-spec-not-text", 6, _job_spec_not_text,
         lambda ws: [f"{ws / 'run' / 'jobs' / 'client0.json'}: cannot read"]),
    Case("make-dag-into-other-files", 6,
         lambda ws: ["make-dag", str(ws / "campaign.toml"), "--out", str(ws / "frames")],
         lambda ws: [f"{ws / 'frames'} is not a run directory of make-dag and not empty"]),
    Case("export-into-other-files", 6, lambda ws: ["export", str(ws / "campaign.toml"),
                                                   "--set", f'model.repository="{ws / "frames"}"'],
         lambda ws: [f"{ws / 'frames'} is not a model repository of export and not empty"]),
    Case("report-not-a-run-directory", 6, lambda ws: ["report", str(ws / "runn")],
         lambda ws: [f"{ws / 'runn'} holds no offline.dag (not a run directory"]),
    Case("injection-output-is-a-directory", 2, _injections_into_a_directory,
         lambda ws: [f"{ws / 'out.h5'} is a directory, not a regular file"]),
    Case("output-is-a-directory", 6, _reference_into_a_directory,
         lambda ws: [f"Is a directory: {ws / 'ref.h5'}"]),
    Case("output-not-writable", 6,
         lambda ws: ["reference", str(ws / "campaign.toml"), "--out", "/proc/offline-iaas.h5"],
         lambda ws: ["cannot write the reference output /proc/offline-iaas.h5"]),
    Case("unknown-node", 6,
         lambda ws: ["client", "--run-dir", str(run_dir(ws)), "--node", "client9"],
         lambda ws: ["client9 is not a node of this run (this run's clients: client0, "
                     "client1)"]),
    Case("node-of-another-kind", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "client0"],
         lambda ws: ["client0 is a client node, not a shard merge (this run's shard merges: "
                     "shard0)"]),
    Case("unknown-shard-node", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "shard7"],
         lambda ws: ["shard7 is not a node of this run (this run's shard merges: shard0)"]),
    Case("prescript-server-node", 6,
         lambda ws: ["prescript", "--run-dir", str(run_dir(ws)), "--node", "server0"],
         lambda ws: ["server0 is a server node, not a client (this run's clients: client0, "
                     "client1)"]),
    Case("merge-part-missing", 6,
         lambda ws: ["merge-shard", "--run-dir", str(run_dir(ws)), "--node", "shard0"],
         lambda ws: ["client0: part missing (no parts/client0.json)",
                     "client1: part missing"]),
    Case("merge-shards-not-merged", 6, lambda ws: ["merge", "--run-dir", str(run_dir(ws))],
         lambda ws: ["cannot index the shard merges",
                     "shard0: shard merge not done (no output/shards/shard0.json)"]),
    Case("merge-part-wrong-checksum", 6, _corrupt_part,
         lambda ws: ["client1: parts/client1.h5 changed after it was written (checksum "
                     "mismatch; set aside as parts/client1.h5.damaged)"],
         set_aside=("run/parts/client1.h5",)),
    Case("merge-part-of-another-campaign", 6, _foreign_part,
         lambda ws: ["client0: part from another campaign's config (stream hash"],
         placeholders=lambda ws: {_hash(ws / "other-run"): "<hash of the other campaign>",
                                  _hash(ws / "run"): "<hash of this campaign>"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, base: Path, tmp_path: Path) -> None:
    check_case(case, base, tmp_path, lambda message, placeholders, code: documented(
        case.id, message, placeholders, exit_code=code))


@pytest.mark.parametrize("fault", ["damaged", "deleted"])
def test_the_command_a_damaged_or_deleted_job_spec_names_writes_it_again(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture, fault: str) -> None:
    """The make-dag command the message gives, run as given, writes the job spec again and
    keeps the finished parts; the node then reads its spec."""
    import re
    import shlex

    from offline_iaas.cli import main
    from offline_iaas.job_specs import read_shard_job

    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    fake_parts(run)
    spec = run / "jobs" / "shard0.json"
    written, parts = spec.read_bytes(), file_hashes(run / "parts")
    if fault == "damaged":
        spec.write_text("{\n")
    else:
        spec.unlink()
    capsys.readouterr()
    assert main(["merge-shard", "--run-dir", str(run), "--node", "shard0"]) == 6
    message = capsys.readouterr().err.strip().splitlines()[-1]
    found = re.search(r"restore it with '([^']+)'", message)
    assert found is not None, message
    words = shlex.split(found.group(1))
    assert words[0] == "offline-iaas" and main(words[1:]) == 0
    assert spec.read_bytes() == written and file_hashes(run / "parts") == parts
    assert read_shard_job(RunDir(run), "shard0").clients == ("client0", "client1")
