"""The run directory's layout, in one place.

``make-dag`` writes it; every node, ``status``, ``report``, ``run-local`` and ``demo`` find
their files through ``RunDir``::

    RUN/campaign.toml             the resolved campaign config
    RUN/offline.dag, <role>.sub   the DAG and its submit descriptions
    RUN/offline.status            DAGMan's node status file (``NODE_STATUS_FILE``)
    RUN/run.json                  run id, config hash, sequence base, node names
    RUN/token                     the servers' access token (``rendezvous/access.py``)
    RUN/model-repository.tar.gz   the model repository for servers without a shared filesystem
    RUN/model-repository/         a server's unpacked copy of that tarball
    RUN/jobs/<client>.json        a client job's share (its pieces; ``records.py``)
    RUN/parts/<client>.h5, .json  a client's output and its sidecar; .checkpoints/ its checkpoints;
                                  .claim the server it streams to now
    RUN/jobs/<shard>.json         a shard merge's GPS interval and parent clients
    RUN/output/campaign.h5, .json the merge's output (with shards: their index) and summary
    RUN/output/frames/<IFO>/, deepclean.lcf, segments/   the cleaned strain's GWF files, their
                                  cache and the gate's segments (DeepClean's modes)
    RUN/output/shards/<shard>.h5, .json, .frames/   a shard merge's output and summary
    RUN/servers/<server>.json     a live server's address; .epoch its start count; .refused
                                  why it refused to serve (its repository); .unhealthy the
                                  epoch a client was told its model's stub is not healthy
    RUN/logs/<node>.out, .err     a node's logs (the submit files' output and error; .log
                                  HTCondor's event log); .pre.log its PRE script's (run-local),
                                  .pre-waiting-since its first deferral
    RUN/logs/<server>-tritonserver.log   tritonserver's output, serve's own lines among it
    RUN/monitor/<server>.csv      Triton statistics of a server
    RUN/local-state.json          run-local's node states; .run-local.lock its lock
    RUN/scratch/<node>.<n>/       run-local's sandbox of attempt n of a node with file transfer
    RUN/job-ads.json              run-local's stand-in for the schedd's job ads
    RUN/summary.json              the FINAL node's summary
    RUN/report/index.html         the campaign report

The JSON records among these files are typed and read through ``records.py``; when a node
is complete is ``completeness.py``'s.
"""

from __future__ import annotations

from pathlib import Path

MERGE_NODE = "merge"
SHARD_PREFIX = "shard"
"""Shard merge nodes are ``shard0``, ``shard1``... (``merge/tree.py``)."""


DAGMAN_STATUS_FILE = "offline.status"
"""DAGMan's node status file, named relative to the DAG (``NODE_STATUS_FILE``)."""
REPOSITORY_TARBALL = "model-repository.tar.gz"
"""The packed model repository, named relative to the run directory in submit files."""


def is_shard_node(name: str) -> bool:
    return name.startswith(SHARD_PREFIX) and name[len(SHARD_PREFIX):].isdigit()


def restore_command(run: RunDir) -> str:
    """The command that writes make-dag's files of a run again (``run.json``, the DAG, the job
    specs): make-dag of the run's own config into it, which keeps its finished parts."""
    return f"offline-iaas make-dag {run.config} --out {run.path}"


def restore_advice(run: RunDir) -> str:
    """How a message tells the user to restore a lost or damaged make-dag file of ``run``."""
    return f"restore it with '{restore_command(run)}' (the finished parts are kept)"


def restore_advice_for(path: Path) -> str:
    """``restore_advice`` of the run directory whose make-dag file is ``path`` (its top level:
    run.json, the DAG), for a record that knows its file only."""
    return restore_advice(RunDir(path.parent))


SUBDIRS: tuple[str, ...] = ("logs", "servers", "parts", "output", "jobs")


class RunDir:
    """Paths of one run directory (nothing is read or created on construction)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def absolute(self) -> RunDir:
        """The same directory named by an absolute path (what log lines and messages name;
        the submit files and job specs name none: a run directory is relocatable)."""
        return self if self.path.is_absolute() else RunDir(self.path.absolute())

    def create(self) -> None:
        """Make the directory and its ``SUBDIRS``."""
        self.path.mkdir(parents=True, exist_ok=True)
        for sub in SUBDIRS:
            (self.path / sub).mkdir(exist_ok=True)

    def foreign_entries(self) -> list[str]:
        """What an existing directory holds that no make-dag wrote, when it holds no mark of
        one (``offline.dag``, ``run.json``, ``token``): its names, sorted (empty: a new, empty
        or make-dag's directory)."""
        if not self.path.is_dir() or any(
                p.exists() for p in (self.dag, self.run_info, self.token)):
            return []
        return sorted(p.name for p in self.path.iterdir() if p.name not in SUBDIRS)

    @property
    def config(self) -> Path:
        return self.path / "campaign.toml"

    @property
    def dag(self) -> Path:
        return self.path / "offline.dag"

    def submit(self, role: str) -> Path:
        """The submit description of a role (``server``, ``client``, ...)."""
        return self.path / f"{role}.sub"

    @property
    def dagman_status(self) -> Path:
        """DAGMan's node status file (the DAG's ``NODE_STATUS_FILE``)."""
        return self.path / DAGMAN_STATUS_FILE

    @property
    def final_summary(self) -> Path:
        """The FINAL node's summary (the campaign's is ``output``'s second path)."""
        return self.path / "summary.json"

    @property
    def repository_tarball(self) -> Path:
        """The model repository packed for servers without a shared filesystem."""
        return self.path / REPOSITORY_TARBALL

    @property
    def model_repository(self) -> Path:
        """Where a server unpacks the tarball."""
        return self.path / "model-repository"

    @property
    def report(self) -> Path:
        """The campaign report's page."""
        return self.path / "report" / "index.html"

    @property
    def lock(self) -> Path:
        """run-local's lock: one executor per run directory."""
        return self.path / ".run-local.lock"

    @property
    def job_ads(self) -> Path:
        """run-local's stand-in for the schedd's job ads (``rendezvous/job_ads.py``)."""
        return self.path / "job-ads.json"

    def resolve(self, path: str | Path) -> Path:
        """A path as the jobs see it: relative paths are relative to the run directory, where
        every job starts."""
        path = Path(path)
        return path if path.is_absolute() else self.path / path

    @property
    def run_info(self) -> Path:
        return self.path / "run.json"

    @property
    def token(self) -> Path:
        """The servers' access token (``rendezvous/access.py``)."""
        return self.path / "token"

    @property
    def local_state(self) -> Path:
        return self.path / "local-state.json"

    @property
    def jobs(self) -> Path:
        return self.path / "jobs"

    def job(self, node: str) -> Path:
        """A node's job spec: a client's (``jobs/client3.json``) or a shard merge's
        (``jobs/shard0.json``)."""
        return self.jobs / f"{node}.json"

    @property
    def servers(self) -> Path:
        return self.path / "servers"

    @property
    def parts(self) -> Path:
        return self.path / "parts"

    def part(self, node: str) -> tuple[Path, Path]:
        """A client's part and its sidecar."""
        return self.parts / f"{node}.h5", self.parts / f"{node}.json"

    def checkpoints(self, node: str) -> Path:
        """A client's checkpoints."""
        return self.parts / f"{node}.checkpoints"

    def claim(self, node: str) -> Path:
        """The server a client streams to now (``client/balance.py``)."""
        return self.parts / f"{node}.claim"

    @property
    def output(self) -> tuple[Path, Path]:
        """The merge's output file and its summary."""
        output = self.path / "output"
        return output / "campaign.h5", output / "campaign.json"

    @property
    def output_frames(self) -> Path:
        """The cleaned strain's GWF files, LAL cache and segment lists."""
        return self.path / "output" / "frames"

    @property
    def output_shards(self) -> Path:
        """The shard merges' outputs."""
        return self.path / "output" / "shards"

    def shard_output(self, node: str) -> tuple[Path, Path]:
        """A shard merge's output file and its summary."""
        return self.output_shards / f"{node}.h5", self.output_shards / f"{node}.json"

    def shard_frames(self, node: str) -> Path:
        """A shard merge's GWF files (linked into ``output/frames`` by the index)."""
        return self.output_shards / f"{node}.frames"

    def address(self, server: str) -> Path:
        return self.servers / f"{server}.json"

    def epoch(self, server: str) -> Path:
        return self.servers / f"{server}.epoch"

    def refusal(self, server: str) -> Path:
        """Why a server refused to serve (its repository does not fit the campaign)."""
        return self.servers / f"{server}.refused"

    def unhealthy(self, server: str) -> Path:
        """The server epoch at which a client was answered that the model's stub is not
        healthy (``rendezvous/addresses.py``)."""
        return self.servers / f"{server}.unhealthy"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def tritonserver_log(self, node: str) -> Path:
        """Where server ``node``'s ``serve`` sends tritonserver's output (its stack trace on a
        fatal signal) and its own lines (``serve.crashes.append_serve_line``)."""
        return self.logs / f"{node}-tritonserver.log"

    def node_log(self, node: str, kind: str) -> Path:
        """A node's log ``logs/<node>.<kind>``: ``out`` and ``err`` (the submit files'
        ``output`` and ``error``), ``pre.log`` (run-local's PRE script), ``pre-waiting-since``
        (the PRE script's first deferral)."""
        return self.logs / f"{node}.{kind}"

    @property
    def scratch(self) -> Path:
        """run-local's per-attempt sandboxes."""
        return self.path / "scratch"

    def sandbox(self, node: str, attempt: int) -> Path:
        """run-local's sandbox of ``attempt`` of a node with file transfer."""
        return self.scratch / f"{node}.{attempt}"

    @property
    def monitor(self) -> Path:
        return self.path / "monitor"

    def monitor_csv(self, server: str) -> Path:
        return self.monitor / f"{server}.csv"
