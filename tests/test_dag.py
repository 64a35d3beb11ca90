"""The campaign DAG: dag_text, parse_dag and make_dag."""

from __future__ import annotations

import json
import re
from pathlib import Path

import htcondor2
import pytest

from offline_iaas.completeness import Hashes, merge_problem, part_problem
from offline_iaas.config import config_from_dict, load_config
from offline_iaas.errors import ConfigError, DataError, RunError, exit_code
from offline_iaas.job_specs import read_client_job
from offline_iaas.records import read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import client_shares
from offline_iaas.workflow.dag import Script, parse_dag
from offline_iaas.workflow.dag_writer import dag_text
from offline_iaas.workflow.make_dag import SEQUENCE_BLOCK, console_script, make_dag
from tests.error_catalogue import documented
from tests.helpers import complete_merge, complete_part, file_hashes, skip_data_check


def campaign(tmp_path: Path, **sections: dict) -> object:
    raw = {
        "data": {
            "frames": "frames",
            "channels": ["H1:STRAIN", "L1:STRAIN"],
            "start": 1_000_000_000,
            "duration": 64,
            "sample_rate": 256,
        },
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": 2, "clients_per_server": 2},
        "workflow": {"retries": 3, "max_parallel_clients": 2},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, tmp_path / "c.toml")


@pytest.fixture
def data_check(monkeypatch: pytest.MonkeyPatch) -> list:
    """Stand-in for the frame preflight make-dag runs; records its calls."""
    return skip_data_check(monkeypatch)


def sequence_ids(spec: dict) -> list[int]:
    """The sequence IDs of a job spec (one stream, or several pieces)."""
    streams = spec["pieces"] if "pieces" in spec else [spec]
    return [s["sequence_id"] for s in streams]


# ---- dag_text / parse_dag ----------------------------------------------------------------
def test_round_trip_two_servers_two_clients_each(tmp_path: Path) -> None:
    config = campaign(tmp_path)
    shares = client_shares(config, sequence_base=7 * SEQUENCE_BLOCK)
    text = dag_text(["server0", "server1"], shares, retries=3, max_parallel_clients=2)
    dag = parse_dag(text)

    assert list(dag.nodes) == [
        "server0",
        "server1",
        "client0",
        "client1",
        "client2",
        "client3",
        "merge",
    ]
    services = [n for n in dag.nodes.values() if n.kind == "SERVICE"]
    assert [n.name for n in services] == ["server0", "server1"]
    assert all(n.submit == "server.sub" and n.retries == 0 and not n.parents for n in services)
    for share in shares:
        node = dag.nodes[share.node]
        assert node.kind == "JOB" and node.submit == "client.sub"
        assert node.retries == 3 and node.category == "clients" and not node.parents
        assert node.variables == {"node": share.node, "server": share.server}
    merge = dag.nodes["merge"]
    assert merge.kind == "JOB" and merge.submit == "merge.sub"
    assert merge.parents == {"client0", "client1", "client2", "client3"}
    assert merge.variables == {"node": "merge"}
    assert dag.nodes["server1"].variables == {"node": "server1"}
    assert dag.maxjobs == {"clients": 2}
    assert dag.node_status_file == "offline.status"
    assert dag.descendants("client2") == {"merge"}
    assert "MAXJOBS clients 2" in text and "CATEGORY client0 clients" in text


def test_fatal_exit_final_node_and_pre_script(tmp_path: Path) -> None:
    shares = client_shares(campaign(tmp_path))
    pre = Script("/env/bin/offline-iaas", ("prescript", "--node", "$JOB"), 75, 30)
    text = dag_text(
        ["server0", "server1"], shares, retries=2, max_parallel_clients=0,
        fatal_exit=exit_code(ConfigError), final=True, client_pre=pre,
    )
    assert f"RETRY client0 2 UNLESS-EXIT {exit_code(ConfigError)}" in text
    assert f"ABORT-DAG-ON client3 {exit_code(ConfigError)} RETURN 1" in text
    assert "SCRIPT DEFER 75 30 PRE client1 /env/bin/offline-iaas prescript --node $JOB" in text
    dag = parse_dag(text)
    assert list(dag.nodes)[-1] == "final" and dag.nodes["final"].kind == "FINAL"
    assert not dag.nodes["final"].parents and dag.nodes["final"].submit == "final.sub"
    for share in shares:
        node = dag.nodes[share.node]
        assert (node.retries, node.unless_exit) == (2, exit_code(ConfigError))
        assert (node.abort_exit, node.abort_return) == (exit_code(ConfigError), 1)
        assert node.pre == pre
        assert node.pre.argv({"$JOB": share.node}) == [
            "/env/bin/offline-iaas", "prescript", "--node", share.node,
        ]
    assert dag.nodes["merge"].abort_exit == exit_code(ConfigError)
    assert dag.nodes["merge"].pre is None and dag.nodes["server0"].pre is None


@pytest.mark.parametrize("sharded", [False, True], ids=["single merge", "shard merges + index"])
def test_the_merge_and_the_index_retry_like_the_shard_merges(tmp_path: Path,
                                                             sharded: bool) -> None:
    """A merge that dies (a node lost, a full disk since freed) is retried as the clients and
    shard merges are; a configuration error (exit code 2) is not retried and aborts the DAG."""
    shares = client_shares(campaign(tmp_path))
    shards = [("shard0", ["client0", "client1"]), ("shard1", ["client2", "client3"])]
    text = dag_text(["server0", "server1"], shares, retries=3, max_parallel_clients=0,
                    fatal_exit=exit_code(ConfigError), final=True,
                    shards=shards if sharded else ())
    assert f"RETRY merge 3 UNLESS-EXIT {exit_code(ConfigError)}" in text.splitlines()
    dag = parse_dag(text)
    merging = ["merge", *(["shard0", "shard1"] if sharded else [])]
    for name in merging:
        node = dag.nodes[name]
        assert (node.retries, node.unless_exit) == (3, exit_code(ConfigError)), name
        assert (node.abort_exit, node.abort_return) == (exit_code(ConfigError), 1), name
    without = dag_text(["server0", "server1"], shares, retries=0, max_parallel_clients=0)
    assert parse_dag(without).nodes["merge"].retries == 0


def test_parse_script_and_abort_forms() -> None:
    dag = parse_dag(
        "JOB a a.sub\nJOB b b.sub\nFINAL f f.sub\n"
        "SCRIPT PRE a /bin/pre.sh $JOB $RETRY\n"
        "SCRIPT DEFER 4 10 DEBUG pre.log ALL PRE b pre.sh\n"
        "SCRIPT PRE f final.sh $DAG_STATUS\n"
        "ABORT-DAG-ON a 3\nABORT-DAG-ON b 5 RETURN 1\n"
    )
    assert dag.nodes["a"].pre == Script("/bin/pre.sh", ("$JOB", "$RETRY"))
    assert dag.nodes["a"].pre.argv({"$JOB": "a", "$RETRY": "0"}) == ["/bin/pre.sh", "a", "0"]
    assert dag.nodes["b"].pre == Script("pre.sh", (), 4, 10)
    assert dag.nodes["f"].pre == Script("final.sh", ("$DAG_STATUS",))
    assert (dag.nodes["a"].abort_exit, dag.nodes["a"].abort_return) == (3, None)
    assert (dag.nodes["b"].abort_exit, dag.nodes["b"].abort_return) == (5, 1)


def test_no_maxjobs_without_limit(tmp_path: Path) -> None:
    shares = client_shares(campaign(tmp_path))
    text = dag_text(["server0", "server1"], shares, retries=0, max_parallel_clients=0)
    assert not [line for line in text.splitlines() if line.startswith("MAXJOBS")]
    assert parse_dag(text).maxjobs == {}


def test_dag_text_rejects_unknown_server(tmp_path: Path) -> None:
    shares = client_shares(campaign(tmp_path))
    with pytest.raises(ValueError, match="server1"):
        dag_text(["server0"], shares, retries=0, max_parallel_clients=0)


def test_parse_full_syntax() -> None:
    text = """
    # comment
    # nodes may be used before the lines that define them
    parent a b child c d
    Job a a.sub
    JOB b b.sub
    node c c.sub
    JOB d d.sub
    SERVICE s s.sub
    FINAL f f.sub
    VARS a node="a" msg="say \\"hi\\" \\\\o/"   path = "x y"
    VARS s PREPEND node="s"
    vars ALL_NODES common="1"
    RETRY c 4 UNLESS-EXIT 42
    RETRY d 1
    CATEGORY c heavy
    MAXJOBS heavy 1
    NODE_STATUS_FILE status.txt 10 ALWAYS-UPDATE
    """
    dag = parse_dag(text)
    assert [n.kind for n in dag.nodes.values()] == ["JOB"] * 4 + ["SERVICE", "FINAL"]
    assert dag.nodes["a"].variables == {
        "node": "a",
        "msg": 'say "hi" \\o/',
        "path": "x y",
        "common": "1",
    }
    assert dag.nodes["s"].variables == {"node": "s", "common": "1"}
    assert dag.nodes["f"].variables == {}  # ALL_NODES never includes the FINAL node
    assert dag.nodes["c"].parents == {"a", "b"} and dag.nodes["d"].parents == {"a", "b"}
    assert (dag.nodes["c"].retries, dag.nodes["c"].unless_exit) == (4, 42)
    assert (dag.nodes["d"].retries, dag.nodes["d"].unless_exit) == (1, None)
    assert dag.nodes["c"].category == "heavy" and dag.maxjobs == {"heavy": 1}
    assert dag.node_status_file == "status.txt"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("JOB a a.sub\nFROB a\n", 2, "FROB"),
        ("JOB a a.sub\n\n# c\nVARS a node=a\n", 4, "double quotes"),
        ('JOB a a.sub\nVARS a node="a\n', 2, "closing"),
        ('JOB a a.sub\nVARS a queue_x="1"\n', 2, "queue"),
        ('JOB a a.sub\nVARS b node="b"\n', 2, "unknown node 'b'"),
        ("JOB a a.sub\nJOB a b.sub\n", 2, "defined twice"),
        ("JOB a\n", 1, "submit file"),
        ("JOB a a.sub DIR x\n", 1, "unsupported"),
        ("SERVICE s s.sub\nRETRY s 2\n", 2, "SERVICE node s"),
        ("SERVICE s s.sub\nJOB a a.sub\nPARENT s CHILD a\n", 3, "SERVICE node s"),
        ("JOB a a.sub\nPARENT a CHILD b\n", 2, "unknown node 'b'"),
        ("JOB a a.sub\nPARENT a\n", 2, "CHILD"),
        ("JOB a a.sub\nPARENT a CHILD a\n", 2, "own parent"),
        ("JOB a a.sub\nRETRY a many\n", 2, "integer"),
        ("JOB a a.sub\nRETRY a 1 UNLESS 3\n", 2, "UNLESS-EXIT"),
        ("JOB a a.sub\nMAXJOBS c 0\n", 2, "at least 1"),
        ("JOB a a.sub\nCATEGORY a\n", 2, "CATEGORY"),
        ("FINAL f f.sub\nFINAL g g.sub\n", 2, "only one FINAL"),
        ("JOB parent p.sub\n", 1, "cannot be a node name"),
        ("JOB a a.sub\nSCRIPT POST a post.sh\n", 2, "POST is not supported"),
        ("JOB a a.sub\nSCRIPT DEFER 4 PRE a pre.sh\n", 2, "integer"),
        ("JOB a a.sub\nSCRIPT PRE a\n", 2, "expected SCRIPT"),
        ("SERVICE s s.sub\nSCRIPT PRE s pre.sh\n", 2, "SERVICE node s"),
        ("JOB a a.sub\nABORT-DAG-ON a\n", 2, "ABORT-DAG-ON"),
        ("JOB a a.sub\nABORT-DAG-ON a 3 RETURNS 1\n", 2, "ABORT-DAG-ON"),
        ("FINAL f f.sub\nABORT-DAG-ON f 3\n", 2, "FINAL node f"),
    ],
)
def test_parse_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(RunError) as err:
        parse_dag(text)
    message = str(err.value)
    assert message.startswith(f"offline.dag line {line}: "), message
    assert words in message


def test_parse_rejects_a_cycle() -> None:
    with pytest.raises(RunError, match="cycle"):
        parse_dag("JOB a a.sub\nJOB b b.sub\nPARENT a CHILD b\nPARENT b CHILD a\n", "x.dag")


# ---- make_dag ------------------------------------------------------------------------------
def test_make_dag_writes_the_run_directory(tmp_path: Path, data_check: list) -> None:
    config = campaign(tmp_path)
    run = tmp_path / "run"
    shares = make_dag(config, RunDir(run))

    assert data_check == [config]
    for name in (
        "campaign.toml",
        "offline.dag",
        "server.sub",
        "client.sub",
        "merge.sub",
        "final.sub",
        "run.json",
    ):
        assert (run / name).is_file(), name
    for name in ("logs", "servers", "parts", "output"):
        assert (run / name).is_dir() and not any((run / name).iterdir()), name
    assert not list(run.glob(".*.tmp"))

    info = json.loads((run / "run.json").read_text())
    assert info["schema_version"] == 2
    assert (info["stream_hash"], info["merge_hash"]) == (config.stream_hash(), config.merge_hash())
    assert info["sequence_base"] % SEQUENCE_BLOCK == 0
    assert info["servers"] == ["server0", "server1"]
    assert info["clients"] == [share.node for share in shares]
    assert "created" in info
    assert load_config(run / "campaign.toml").merge_hash() == config.merge_hash()

    dag = parse_dag((run / "offline.dag").read_text())
    specs = {p.stem: json.loads(p.read_text()) for p in (run / "jobs").glob("client*.json")}
    jobs = [n for n in dag.nodes.values() if n.kind == "JOB" and n.name.startswith("client")]
    assert sorted(specs) == sorted(n.name for n in jobs) == sorted(info["clients"])
    services = {n.name for n in dag.nodes.values() if n.kind == "SERVICE"}
    assert services == set(info["servers"])
    # the span lies in one shard of merge.shard_seconds (4096 s): one shard merge, the index
    assert info["shards"] == ["shard0"]
    assert dag.nodes["shard0"].parents == set(specs)
    assert dag.nodes["merge"].parents == {"shard0"}
    assert dag.maxjobs == {"clients": 2} and all(n.retries == 3 for n in jobs)

    ids_per_server: dict[str, set[int]] = {}
    for share in shares:
        spec = specs[share.node]
        assert spec["server"] in services
        # what the client reads, nothing else (no unread fields, no path of the run directory)
        assert set(spec) == {"schema_version", "index", "node", "server", "pieces"}
        for sequence_id in sequence_ids(spec):
            assert sequence_id - info["sequence_base"] in range(1, SEQUENCE_BLOCK)
            assert sequence_id not in ids_per_server.setdefault(spec["server"], set())
            ids_per_server[spec["server"]].add(sequence_id)
        assert read_client_job(RunDir(run), share.node) == share
    assert sorted(ids_per_server) == ["server0", "server1"]

    exe = str(console_script())
    for role, args in [("server", "serve"), ("client", "client"), ("merge", "merge")]:
        submit = dict(htcondor2.Submit((run / f"{role}.sub").read_text()).items())
        assert submit["executable"] == exe
        assert submit["arguments"].startswith(f'"{args} --run-dir .')
        assert "initialdir" not in submit
        assert not re.search(r"@[A-Z_]+@", (run / f"{role}.sub").read_text())
    # relocatable: nothing that runs a node names the directory, so a copy runs its own files
    written = [run / "offline.dag", *run.glob("*.sub"), *(run / "jobs").glob("*.json")]
    assert [p.name for p in written if str(run) in p.read_text()] == []


def test_make_dag_checks_data_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_data_check(monkeypatch, DataError("no frames"))
    with pytest.raises(DataError):
        make_dag(campaign(tmp_path), RunDir(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_make_dag_refuses_another_campaign(tmp_path: Path, data_check: list) -> None:
    run = tmp_path / "run"
    make_dag(campaign(tmp_path), RunDir(run))
    before = file_hashes(run)
    other = campaign(tmp_path, data={"duration": 128})
    with pytest.raises(RunError, match="another campaign"):
        make_dag(other, RunDir(run))
    assert file_hashes(run) == before


def test_make_dag_takes_a_merge_only_change_and_keeps_the_parts(
    tmp_path: Path, data_check: list
) -> None:
    """A config that differs in what only the merge reads is the same campaign (stream hash):
    make-dag rewrites the run directory, the parts stay complete, the merge does not."""
    run = tmp_path / "run"
    make_dag(campaign(tmp_path), RunDir(run))
    complete_part(RunDir(run), "client0")
    complete_merge(RunDir(run))
    edited = campaign(tmp_path, search={"cluster_seconds": 2.0, "found_seconds": 0.5})
    make_dag(edited, RunDir(run))
    info = read_run_info(RunDir(run))
    assert (info.stream_hash, info.merge_hash) == (edited.stream_hash(), edited.merge_hash())
    hashes = Hashes.of(edited)
    assert part_problem(RunDir(run), "client0", hashes) is None
    assert "another campaign's config (merge hash" in str(merge_problem(RunDir(run), hashes))


def test_make_dag_rewrites_the_same_campaign(tmp_path: Path, data_check: list) -> None:
    run = tmp_path / "run"
    config = campaign(tmp_path)
    first = make_dag(config, RunDir(run))
    (run / "parts" / "client0.json").write_text('{"complete": true}')
    again = make_dag(campaign(tmp_path), RunDir(run))
    assert again == first  # same sequence base kept
    assert (run / "parts" / "client0.json").read_text() == '{"complete": true}'
    explicit = make_dag(config, RunDir(run), sequence_base=3 * SEQUENCE_BLOCK)
    ids = [p.sequence_id for s in explicit for p in s.pieces]
    assert ids == [3 * SEQUENCE_BLOCK + i for i in range(1, 5)]


def test_make_dag_refuses_unknown_dag(tmp_path: Path, data_check: list) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "offline.dag").write_text("JOB a a.sub\n")
    with pytest.raises(RunError, match="run.json"):
        make_dag(campaign(tmp_path), RunDir(run))
    assert sorted(p.name for p in run.iterdir()) == ["offline.dag"]


def test_make_dag_refuses_paths_htcondor_cannot_carry(tmp_path: Path, data_check: list) -> None:
    with pytest.raises(RunError, match="run directory"):
        make_dag(campaign(tmp_path), RunDir(tmp_path / "my run"))
    assert not (tmp_path / "my run").exists()


def test_make_dag_for_ldg_needs_only_the_profile_and_the_accounting_tag(tmp_path: Path) -> None:
    """The cluster profile implies remote clients, so it implies server.bind = 0.0.0.0."""
    from offline_iaas.cli import main
    from offline_iaas.data.synth import write_synthetic_dataset
    from offline_iaas.repository.export import export_repository
    from offline_iaas.workflow.profiles import ACCOUNTING_EXAMPLE
    from tests.helpers import SMALL_CAMPAIGN

    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(tmp_path / "campaign.toml"))
    export_repository(load_config(tmp_path / "campaign.toml"))  # make-dag checks it
    run = tmp_path / "run"
    assert main(["make-dag", str(tmp_path / "campaign.toml"), "--out", str(run),
                 "--set", "site.profile=ldg",
                 "--set", f'site.accounting_group="{ACCOUNTING_EXAMPLE}"']) == 0
    resolved = load_config(run / "campaign.toml")
    assert resolved.server.bind == "0.0.0.0" and resolved.site.profile == "ldg"
    submit = htcondor2.Submit((run / "server.sub").read_text())
    assert submit["accounting_group"] == ACCOUNTING_EXAMPLE


def test_a_retry_count_beyond_the_config_bound_is_refused_with_its_line(tmp_path: Path) -> None:
    """``RETRY client0 99999999999999999999`` edited into offline.dag: one RunError naming the
    line (before: parsed, and ``plan --simulate`` drew that many attempts until it ran out of
    memory); the config's bound itself (``MAX_RETRIES``) parses (the control)."""
    from offline_iaas.config_numbers import MAX_RETRIES

    text = "JOB client0 client.sub\nRETRY client0 {count} UNLESS-EXIT 2\n"
    assert parse_dag(text.format(count=MAX_RETRIES)).nodes["client0"].retries == MAX_RETRIES
    source = tmp_path / "run" / "offline.dag"
    with pytest.raises(RunError) as refused:
        parse_dag(text.format(count=99999999999999999999), str(source))
    assert str(refused.value) == (
        f"{source} line 2: the RETRY count must be at most {MAX_RETRIES} (as "
        "workflow.retries), got 99999999999999999999")
    documented("dag-retry-beyond-bound", str(refused.value), {tmp_path: "<ws>"},
               exit_code=exit_code(refused.value))
    with pytest.raises(RunError, match="line 2: the RETRY count must be at most"):
        parse_dag(text.format(count=MAX_RETRIES + 1))
