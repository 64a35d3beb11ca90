"""The makespan simulation of a campaign DAG (sizing/simulate.py, sizing/replay.py): every
expected time below is worked out by hand from the model in sizing/simulate.py's docstring."""

from __future__ import annotations

import math
import random

import pytest

from offline_iaas.records import ClientShare, Piece
from offline_iaas.sizing.replay import FailureModel, SimulationRates, node_role
from offline_iaas.sizing.simulate import share_work_seconds, simulate
from offline_iaas.workflow.dag import parse_dag
from offline_iaas.workflow.dag_writer import dag_text


def dag_of(
    clients: dict[str, str],
    *,
    shards: dict[str, list[str]] | None = None,
    retries: int = 0,
    maxjobs: int = 0,
    final: bool = True,
) -> str:
    """DAG text in the campaign's shape: client -> server, shard -> its parent clients."""
    servers = sorted(set(clients.values()), key=lambda s: int(s.removeprefix("server")))
    lines = [f"SERVICE {s} server.sub" for s in servers]
    for node, server in clients.items():
        lines += [
            f"JOB {node} client.sub",
            f'VARS {node} node="{node}" server="{server}"',
            f"RETRY {node} {retries}",
            f"CATEGORY {node} clients",
        ]
    merge_parents = list(clients)
    if shards:
        for shard, parents in shards.items():
            lines += [f"JOB {shard} shard.sub", f"PARENT {' '.join(parents)} CHILD {shard}"]
        merge_parents = list(shards)
    lines += ["JOB merge merge.sub", f"PARENT {' '.join(merge_parents)} CHILD merge"]
    if final:
        lines.append("FINAL final final.sub")
    if maxjobs:
        lines.append(f"MAXJOBS clients {maxjobs}")
    return "\n".join(lines) + "\n"


ONE_SERVER = dag_of({"client0": "server0", "client1": "server0"})


# ---- streaming ----------------------------------------------------------------------------
def test_two_clients_share_one_server_and_end_at_start_plus_total_work_over_rate() -> None:
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=5.0,
                            merge_index_seconds=3.0, final_seconds=2.0)
    result = simulate(parse_dag(ONE_SERVER), {"client0": 100.0, "client1": 100.0}, rates)
    # 200 data-s at 10 data-s/s from t = 5; then the merge (3 s) and FINAL (2 s)
    assert result.stages.servers_ready_seconds == pytest.approx(5.0)
    assert result.stages.clients_done_seconds == pytest.approx(25.0)
    assert result.representative.end_seconds["client0"] == pytest.approx(25.0)
    assert result.stages.merge_done_seconds == pytest.approx(28.0)
    assert result.makespan_seconds == pytest.approx(30.0)
    assert result.finished and result.stuck_or_failed == ()
    assert result.stages.shards_done_seconds is None  # no shard nodes
    assert result.critical_path == ("server0", "client1", "merge", "final")


def test_capacity_freed_by_a_finished_client_goes_to_the_other() -> None:
    rates = SimulationRates(server_data_seconds_per_second=10.0)
    result = simulate(parse_dag(ONE_SERVER), {"client0": 50.0, "client1": 150.0}, rates)
    ends = result.representative.end_seconds
    # 5 data-s/s each until client0 is done (50 / 5 = 10 s), then client1 alone: 100 / 10
    assert ends["client0"] == pytest.approx(10.0)
    assert ends["client1"] == pytest.approx(20.0)


def test_per_client_cap_runs_two_clients_in_parallel_and_maxjobs_one_serialises_them() -> None:
    rates = SimulationRates(server_data_seconds_per_second=20.0,
                            client_data_seconds_per_second=10.0, server_start_seconds=5.0)
    work = {"client0": 100.0, "client1": 100.0}
    parallel = simulate(parse_dag(ONE_SERVER), work, rates)
    serial = simulate(parse_dag(dag_of({"client0": "server0", "client1": "server0"},
                                       maxjobs=1)), work, rates)
    # capped at 10 each: 100 / 10 after t = 5, together; one at a time: 5 + 10 + 10
    assert parallel.makespan_seconds == pytest.approx(15.0)
    assert serial.makespan_seconds == pytest.approx(25.0)
    assert serial.representative.end_seconds["client0"] == pytest.approx(15.0)
    assert serial.critical_path == ("server0", "client0", "client1", "merge", "final")


def test_job_start_latency_is_paid_by_every_job_and_overlaps_server_start() -> None:
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=5.0,
                            job_start_seconds=8.0, merge_index_seconds=3.0, final_seconds=2.0)
    result = simulate(parse_dag(ONE_SERVER), {"client0": 100.0, "client1": 100.0}, rates)
    # clients stream from 8 (their start, after the server's), merge 28 + 8 + 3, final + 8 + 2
    assert result.stages.clients_done_seconds == pytest.approx(28.0)
    assert result.makespan_seconds == pytest.approx(49.0)
    assert result.critical_path[0] == "client1"  # the server was ready before it: not on it
    assert result.representative.attempts == 4 and result.representative.retries == 0


# ---- merges -------------------------------------------------------------------------------
def test_shard_merge_starts_when_its_own_clients_finish_not_after_all_clients() -> None:
    text = dag_of({"client0": "server0", "client1": "server1"},
                  shards={"shard0": ["client0"], "shard1": ["client1"]})
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=5.0,
                            merge_data_seconds_per_second=50.0, merge_index_seconds=1.0)
    result = simulate(parse_dag(text), {"client0": 100.0, "client1": 300.0}, rates)
    ends = result.representative.end_seconds
    # shard0: client0 ends at 5 + 10 = 15, then 100 / 50 = 2 s; shard1: 5 + 30 + 300 / 50
    assert ends["shard0"] == pytest.approx(17.0)
    assert ends["shard1"] == pytest.approx(41.0)
    assert result.stages.shards_done_seconds == pytest.approx(41.0)
    assert result.makespan_seconds == pytest.approx(42.0)
    assert result.critical_path == ("server1", "client1", "shard1", "merge", "final")


def test_shard_work_given_explicitly_overrides_the_sum_of_its_clients() -> None:
    text = dag_of({"client0": "server0", "client1": "server0"},
                  shards={"shard0": ["client0", "client1"]}, final=False)
    rates = SimulationRates(server_data_seconds_per_second=10.0,
                            merge_data_seconds_per_second=20.0)
    work = {"client0": 100.0, "client1": 100.0}
    default = simulate(parse_dag(text), work, rates)
    given = simulate(parse_dag(text), {**work, "shard0": 40.0}, rates)
    assert default.makespan_seconds == pytest.approx(20.0 + 200.0 / 20.0)
    assert given.makespan_seconds == pytest.approx(20.0 + 40.0 / 20.0)


# ---- servers that never start -------------------------------------------------------------
def test_clients_of_a_never_starting_server_fail_over_after_failover_seconds() -> None:
    text = dag_of({"client0": "server0", "client1": "server1"})
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=5.0)
    failures = FailureModel(never_starting_servers={"server1"}, failover_seconds=30.0)
    result = simulate(parse_dag(text), {"client0": 300.0, "client1": 100.0}, rates, failures)
    ends = result.representative.end_seconds
    # client0 alone 5..30 (250 done); shared from 30: its last 50 at 5/s -> 40; client1 has
    # 50 done by then, its last 50 alone at 10/s -> 45
    assert ends["client0"] == pytest.approx(40.0)
    assert ends["client1"] == pytest.approx(45.0)
    assert result.representative.failed_over == ("client1",)
    assert result.finished and result.makespan_seconds == pytest.approx(45.0)
    assert any("never starting: server1" in line for line in result.describe())


def test_failover_goes_to_the_least_loaded_ready_server() -> None:
    text = dag_of({"client0": "server0", "client1": "server0", "client2": "server1",
                   "client3": "server2"})
    rates = SimulationRates(server_data_seconds_per_second=10.0)
    failures = FailureModel(never_starting_servers={"server2"}, failover_seconds=30.0)
    work = dict.fromkeys(("client0", "client1", "client2", "client3"), 600.0)
    ends = simulate(parse_dag(text), work, rates, failures).representative.end_seconds
    # client3 joins server1 (1 client, server0 has 2) at 30, when client2 has done 300:
    # both at 5/s until client2 ends at 90; client3 has 300 left, alone: 90 + 30
    assert ends["client2"] == pytest.approx(90.0)
    assert ends["client3"] == pytest.approx(120.0)
    assert ends["client0"] == pytest.approx(120.0)  # server0 untouched: 1200 / 10


def test_clients_past_failover_before_any_server_is_up_take_their_own_server() -> None:
    text = dag_of({"client0": "server0", "client1": "server1"})
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=100.0)
    failures = FailureModel(failover_seconds=30.0)
    result = simulate(parse_dag(text), {"client0": 100.0, "client1": 100.0}, rates, failures)
    assert result.representative.failed_over == ()
    assert result.makespan_seconds == pytest.approx(110.0)


def test_without_failover_the_clients_of_a_dead_server_are_stuck_and_named() -> None:
    text = dag_of({"client0": "server0", "client1": "server1"})
    rates = SimulationRates(server_data_seconds_per_second=10.0)
    failures = FailureModel(never_starting_servers={"server1"}, failover_seconds=0.0)
    result = simulate(parse_dag(text), {"client0": 100.0, "client1": 100.0}, rates, failures)
    assert math.isinf(result.makespan_seconds)
    assert not result.finished
    assert result.stuck_or_failed == ("client1",)
    assert result.representative.stuck == ("client1",)
    assert result.representative.end_seconds["client0"] == pytest.approx(10.0)
    assert result.stages.merge_done_seconds is None
    text_lines = "\n".join(result.describe())
    assert "NOT FINISHED" in text_lines and "client1" in text_lines


# ---- client failures ----------------------------------------------------------------------
def test_each_retry_of_a_checkpointing_client_costs_one_more_job_start() -> None:
    text = dag_of({"client0": "server0"}, retries=50)
    rates = SimulationRates(server_data_seconds_per_second=10.0, job_start_seconds=7.0)
    work = {"client0": 100.0}
    clean = simulate(parse_dag(text), work, rates)
    flaky = simulate(parse_dag(text), work, rates,
                     FailureModel(failure_rate=0.5, seed=3, replications=40))
    assert clean.makespan_seconds == pytest.approx(7.0 + 10.0 + 7.0 + 7.0)  # client, merge, final
    assert flaky.makespan_seconds > clean.makespan_seconds
    assert flaky.mean_retries > 0
    for run in flaky.replications:
        # the work is resumed, not redone: a retry only adds its job start
        assert run.finished
        assert run.makespan_seconds == pytest.approx(clean.makespan_seconds + 7.0 * run.retries)


def test_a_client_with_no_retries_left_fails_and_its_descendants_never_run() -> None:
    seed = 11
    text = dag_of({"client0": "server0"}, retries=0)
    rates = SimulationRates(server_data_seconds_per_second=10.0, final_seconds=4.0)
    result = simulate(parse_dag(text), {"client0": 100.0}, rates,
                      FailureModel(failure_rate=1.0, seed=seed))
    # the attempt fails after the drawn fraction of its work (draws: fail?, fraction)
    draws = random.Random(seed)
    draws.random()
    fraction = draws.random()
    assert not result.finished
    assert result.stuck_or_failed == ("client0",)
    assert result.representative.failed == ("client0",)
    assert result.representative.not_run == 1  # the merge
    assert result.stages.merge_done_seconds is None
    assert result.makespan_seconds == pytest.approx(fraction * 100.0 / 10.0 + 4.0)
    # the server was ready when the client started: it did not wait for it
    assert result.critical_path == ("client0", "final")
    assert any("failed (retries exhausted): client0" in line for line in result.describe())


def test_the_same_seed_gives_the_same_result_and_another_seed_another() -> None:
    clients = {f"client{i}": f"server{i // 4}" for i in range(16)}
    dag = parse_dag(dag_of(clients, retries=2, maxjobs=6))
    work = {name: 100.0 + 10.0 * i for i, name in enumerate(clients)}
    rates = SimulationRates(server_data_seconds_per_second=25.0, job_start_seconds=3.0)

    def run(seed: int):
        return simulate(dag, work, rates,
                        FailureModel(failure_rate=0.3, seed=seed, replications=30))

    first, again, other = run(5), run(5), run(6)
    assert first == again
    assert [r.makespan_seconds for r in first.replications] != [
        r.makespan_seconds for r in other.replications]
    assert first.min_seconds <= first.makespan_seconds <= first.max_seconds
    assert first.min_seconds <= first.p90_seconds <= first.max_seconds
    spans = sorted(r.makespan_seconds for r in first.replications)
    assert first.p90_seconds == spans[26]  # nearest rank: ceil(0.9 * 30) = 27th
    assert first.representative.makespan_seconds == spans[14]  # the lower median
    assert first.representative.end_seconds  # kept for the median replication
    assert all(not r.end_seconds for r in first.replications if r is not first.representative)


# ---- scale and inputs ---------------------------------------------------------------------
def test_a_wide_dag_of_equal_clients_ends_at_start_plus_one_servers_share() -> None:
    servers, per_server, shards = 40, 16, 40
    clients = {f"client{i}": f"server{i // per_server}" for i in range(servers * per_server)}
    names = list(clients)
    size = len(names) // shards
    groups = {f"shard{k}": names[k * size:(k + 1) * size] for k in range(shards)}
    dag = parse_dag(dag_of(clients, shards=groups, retries=1))
    rates = SimulationRates(server_data_seconds_per_second=32.0, server_start_seconds=60.0,
                            merge_data_seconds_per_second=160.0)
    result = simulate(dag, dict.fromkeys(names, 100.0), rates)
    # 16 x 100 data-s per server at 32 data-s/s; then a shard merge of 16 x 100 at 160
    assert result.stages.clients_done_seconds == pytest.approx(60.0 + 1600.0 / 32.0)
    assert result.makespan_seconds == pytest.approx(110.0 + 1600.0 / 160.0)
    assert result.counts == {"server": 40, "client": 640, "shard": 40, "merge": 1, "final": 1}


def test_the_dag_that_dag_text_writes_can_be_simulated() -> None:
    def share(i: int, server: str, seconds: float) -> ClientShare:
        piece = Piece(0, i + 1, 0, 0, 1, 1000.0, 1000.0 + seconds, 1000.0, 2000.0)
        return ClientShare(index=i, node=f"client{i}", server=server, pieces=(piece,))

    shares = [share(0, "server0", 64.0), share(1, "server0", 64.0), share(2, "server1", 128.0)]
    dag = parse_dag(dag_text(["server0", "server1"], shares, retries=2,
                             max_parallel_clients=0, final=True))
    work = share_work_seconds(shares)
    assert work == {"client0": 64.0, "client1": 64.0, "client2": 128.0}
    result = simulate(dag, work, SimulationRates(server_data_seconds_per_second=16.0))
    assert result.stages.clients_done_seconds == pytest.approx(8.0)  # 128 / 16 on each
    assert result.finished


def test_computed_makespan_differs_from_a_wrong_expectation() -> None:
    """Negative control: the comparisons above can fail."""
    rates = SimulationRates(server_data_seconds_per_second=10.0, server_start_seconds=5.0)
    result = simulate(parse_dag(ONE_SERVER), {"client0": 100.0, "client1": 100.0}, rates)
    assert result.makespan_seconds != pytest.approx(25.0 + 1.0)
    with pytest.raises(AssertionError):
        assert result.makespan_seconds == pytest.approx(24.0)


def test_bad_inputs_are_refused_with_the_node_named() -> None:
    rates = SimulationRates(server_data_seconds_per_second=10.0)
    with pytest.raises(ValueError, match="client1"):
        simulate(parse_dag(ONE_SERVER), {"client0": 1.0}, rates)
    with pytest.raises(ValueError, match="server9"):
        simulate(parse_dag(ONE_SERVER), {"client0": 1.0, "client1": 1.0}, rates,
                 FailureModel(never_starting_servers={"server9"}))
    odd = ONE_SERVER + "JOB report report.sub\n"
    with pytest.raises(ValueError, match="report"):
        simulate(parse_dag(odd), {"client0": 1.0, "client1": 1.0}, rates)
    with pytest.raises(ValueError):
        SimulationRates(server_data_seconds_per_second=0.0)
    with pytest.raises(ValueError):
        FailureModel(failure_rate=1.5)
    assert node_role("/abs/path/shard.sub") == "shard" and node_role("x.sub") is None


def test_attempt_draws_keep_the_stream_of_every_attempt_but_only_the_attempts_that_run(
        ) -> None:
    """A client's draws stop at its first attempt that does not fail (memory does not grow
    with RETRY) while the generator moves on as if every attempt had been drawn: the same
    seed gives the draws of drawing them all (the results of a seed are unchanged)."""
    from offline_iaas.sizing.simulate import _attempt_draws

    for rate in (0.0, 0.3, 1.0):
        drawn_all, lazily = random.Random(7), random.Random(7)
        for attempts in (1, 3, 1001, 40_000):
            every = [(drawn_all.random(), drawn_all.random()) for _ in range(attempts)]
            kept = _attempt_draws(lazily, attempts, rate)
            assert kept == every[:len(kept)]
            assert all(fail < rate for fail, _ in kept[:-1])
            assert len(kept) == attempts or kept[-1][0] >= rate
            if rate < 1.0 and attempts > 40:
                assert len(kept) < attempts  # the rest was never kept
        assert drawn_all.random() == lazily.random()  # the stream goes on alike


def test_a_huge_retry_count_is_simulated_without_memory_growing_with_it() -> None:
    """A DAG (built, not parsed: ``parse_dag`` refuses RETRY beyond ``MAX_RETRIES``) with
    RETRY 10**7: the simulation keeps only the attempts that run (before: 10**7 pairs per
    client per replication, and for RETRY 10**20 it ran out of memory)."""
    import tracemalloc

    dag = parse_dag(dag_of({"client0": "server0", "client1": "server0"}, retries=2))
    for name in ("client0", "client1"):
        dag.nodes[name].retries = 10**7
    rates = SimulationRates(server_data_seconds_per_second=10.0)
    tracemalloc.start()
    try:
        result = simulate(dag, {"client0": 100.0, "client1": 100.0}, rates,
                          FailureModel(failure_rate=0.3, seed=1, replications=3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.finished
    assert peak < 20 * 2**20, peak  # all 10**7 pairs would be over 1 GB
