"""``run-local``'s and ``status``'s check of a run before anything starts: its ``offline.dag``
read (``read_run_dag``), the run bound to what make-dag planned (``binding.read_bound_run``:
run.json there, campaign.toml not edited in a setting the parts depend on, the DAG holding
every node run.json records) and its shared model repository still the model run.json records
(``repository/pinning.py``: its versions, as the manifest names them; a run whose servers get
make-dag's tarball serves that), run-local's as ``read_bound_dag`` (run.json read once);
``check_run``, status's and the report's: these and the job specs, each file read once."""

from __future__ import annotations

from dataclasses import dataclass

from offline_iaas.binding import (
    JobSpecRead,
    check_job_specs,
    is_make_dag_run,
    not_a_run_directory,
    read_bound_run,
    read_run_record,
)
from offline_iaas.bounded_read import read_text
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import RunError
from offline_iaas.records import RunInfo
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
    return _read_dag(run)[0]


def _read_dag(run: RunDir) -> tuple[Dag, RunInfo | str | None]:
    """``read_run_dag``, and run.json as it read it (``binding.read_run_record``; None: not
    read, the DAG being written by hand)."""
    try:
        text = read_text(run.dag)  # a FIFO is not waited on, /dev/zero not read
    except (FileNotFoundError, NotADirectoryError):  # a file named for the run: no run
        raise not_a_run_directory(run) from None
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        raise RunError(f"{run.dag}: cannot read: {err}") from None
    dag = parse_dag(text, str(run.dag))
    if not (text.startswith(MAKE_DAG_HEADER) or not dag.nodes):
        return dag, None
    info = read_run_record(run)  # a damaged one: check_binding's line
    if isinstance(info, RunInfo):
        planned = [*info.servers, *info.clients, *info.shards, MERGE_NODE, FINAL_NODE]
        missing = [name for name in planned if name not in dag.nodes]
        if missing:
            raise RunError(
                f"{run.dag} lacks node(s) {', '.join(missing)} that make-dag planned "
                f"(run.json): the file is cut short or edited; write it again with "
                f"'{restore_command(run)}' (finished parts are kept)")
    return dag, info


def check_binding(run: RunDir, record: RunInfo | str | None = None,
                  config_text: str | None = None) -> tuple[CampaignConfig, RunInfo] | None:
    """The run's config and record (``read_bound_run``; ``record``: run.json as read
    already, ``config_text``: campaign.toml's text as read already), once it is what make-dag
    planned and its model the one run.json records; None for a DAG written by hand (no
    campaign.toml, no run.json).

    Raises
    ------
    ConfigError, ModelError
        One line: the run is not what make-dag planned.
    RunError
        It is no run directory, or its run.json no run record this offline-iaas reads.
    """
    if not is_make_dag_run(run):
        return None
    config, info = read_bound_run(run, record, config_text)
    if not run.repository_tarball.exists():
        # the versions only (an export adds one); the server reads the graphs too
        check_pinned_model(config.model.repository, info.model, graphs=False)
    return config, info


def read_bound_dag(run: RunDir, config_text: str | None = None
                   ) -> tuple[Dag, tuple[CampaignConfig, RunInfo] | None]:
    """``read_run_dag`` and ``check_binding`` with run.json read once: run-local's check of a
    run before anything starts (``config_text``: campaign.toml's text as read already, None:
    read here).

    Returns
    -------
    tuple
        The DAG, and ``check_binding``'s config and record (None: a DAG written by hand).

    Raises
    ------
    ConfigError, ModelError, RunError
        As ``read_run_dag`` and ``check_binding``.
    """
    dag, record = _read_dag(run)
    return dag, check_binding(run, record, config_text)


@dataclass(frozen=True)
class CheckedRun:
    """A run as ``check_run`` read it, each file once: what status and the report go on
    from."""

    dag: Dag
    config: CampaignConfig | None
    """``RUN/campaign.toml`` (None: a DAG written by hand, beside no campaign.toml)."""
    info: RunInfo | None
    """``RUN/run.json`` (None: as ``config``)."""
    specs: dict[str, JobSpecRead]
    """The job spec of each node run.json lists (none without one)."""


def check_run(run: RunDir, config_text: str | None = None) -> CheckedRun:
    """``status``'s and ``report``'s check of a run directory: its DAG (``read_run_dag``), the
    run bound to make-dag's plan (``check_binding``) and its job specs (``binding
    .check_job_specs``: one edited since make-dag refused; one that does not read is left to
    its node's line), each file read once (``config_text``: campaign.toml's, read already by
    the report, which shows it; None: read here).

    Raises
    ------
    ConfigError, ModelError, RunError
        As ``read_run_dag``, ``check_binding`` and ``check_job_specs``: one line naming the
        file.
    """
    dag, bound = read_bound_dag(run, config_text)
    if bound is None:
        return CheckedRun(dag, None, None, {})
    config, info = bound
    specs = check_job_specs(run, info, (*info.clients, *info.shards), named_by_node=True,
                            parse=True)
    return CheckedRun(dag, config, info, specs)
