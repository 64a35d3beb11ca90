"""``run-local``'s and ``status``'s check of a run before anything starts: the run bound to what
make-dag planned (``binding.read_bound_run``: run.json there, campaign.toml not edited in a
setting the parts depend on) and its shared model repository still the model run.json records
(``repository/pinning.py``: its versions, as the manifest names them; a run whose servers get
make-dag's tarball serves that)."""

from __future__ import annotations

from offline_iaas.binding import is_make_dag_run, read_bound_run
from offline_iaas.repository.pinning import check_pinned_model
from offline_iaas.rundir import RunDir


def check_binding(run: RunDir) -> None:
    """ConfigError or ModelError, one line, when the run is not what make-dag planned (nothing
    for a DAG written by hand: no campaign.toml, no run.json)."""
    if not is_make_dag_run(run):
        return
    config, info = read_bound_run(run)
    if not run.repository_tarball.exists():
        # the versions only (an export adds one); the server reads the graphs too
        check_pinned_model(config.model.repository, info.model, graphs=False)
