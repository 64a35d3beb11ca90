"""``run-local``'s and ``status``'s check of a run before anything starts: its ``offline.dag``
read (``read_run_dag``), the run bound to what make-dag planned (``binding.read_bound_run``:
run.json there, campaign.toml not edited in a setting the parts depend on, the DAG holding
every node run.json records) and its shared model repository still the model run.json records
(``repository/pinning.py``: its versions, as the manifest names them; a run whose servers get
make-dag's tarball serves that)."""

from __future__ import annotations

from offline_iaas import records
from offline_iaas.binding import (
    is_make_dag_run,
    not_a_run_directory,
    read_bound_run,
    run_info_damage,
)
from offline_iaas.bounded_read import read_text
from offline_iaas.errors import RunError
from offline_iaas.repository.pinning import check_pinned_model
from offline_iaas.rundir import MERGE_NODE, RunDir, restore_command
from offline_iaas.workflow.dag import FINAL_NODE, MAKE_DAG_HEADER, Dag, parse_dag


def read_run_dag(run: RunDir) -> Dag:
    """The run's ``offline.dag``, parsed (``dag.parse_dag``); one that make-dag wrote holds
    every node run.json records.

    make-dag's DAG is one that starts with its header line, or one that holds no node at all
    (empty, or cut short within its opening comments: it would run nothing and call the run
    complete); any other DAG beside a run.json is taken as written by hand.

    Raises
    ------
    RunError
        One line naming the file: missing (not a run directory), unreadable or not text, a
        line DAGMan would refuse, or make-dag's DAG without a node run.json records (empty,
        cut short, or edited).
    """
    try:
        text = read_text(run.dag)  # a FIFO is not waited on, /dev/zero not read
    except (FileNotFoundError, NotADirectoryError):  # a file named for the run: no run
        raise not_a_run_directory(run) from None
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        raise RunError(f"{run.dag}: cannot read: {err}") from None
    dag = parse_dag(text, str(run.dag))
    make_dags = text.startswith(MAKE_DAG_HEADER) or not dag.nodes
    if make_dags and run_info_damage(run) is None:
        info = records.read_run_info(run)  # a damaged one: check_binding's line
        planned = [*info.servers, *info.clients, *info.shards, MERGE_NODE, FINAL_NODE]
        missing = [name for name in planned if name not in dag.nodes]
        if missing:
            raise RunError(
                f"{run.dag} lacks node(s) {', '.join(missing)} that make-dag planned "
                f"(run.json): the file is cut short or edited; write it again with "
                f"'{restore_command(run)}' (finished parts are kept)")
    return dag


def check_binding(run: RunDir) -> None:
    """ConfigError or ModelError, one line, when the run is not what make-dag planned, or
    RunError when it is no run directory or its run.json is no run record this offline-iaas
    reads (``read_bound_run``); nothing for a DAG written by hand (no campaign.toml, no
    run.json)."""
    if not is_make_dag_run(run):
        return
    config, info = read_bound_run(run)
    if not run.repository_tarball.exists():
        # the versions only (an export adds one); the server reads the graphs too
        check_pinned_model(config.model.repository, info.model, graphs=False)
