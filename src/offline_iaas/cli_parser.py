"""The ``offline-iaas`` command line's parser: each command's arguments, grouped by what the
commands are for. ``cli`` holds the commands' functions and maps their errors to exit codes."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from offline_iaas import __version__
from offline_iaas.modes import BUILT_IN_MODES

Handler = Callable[[argparse.Namespace], None]


class AddCommand:
    """Adds a command to the parser, its function from ``handlers`` (or ``func``)."""

    def __init__(self, sub: argparse._SubParsersAction, handlers: Mapping[str, Handler]) -> None:
        self.sub, self.handlers = sub, handlers

    def __call__(self, name: str, help_text: str, config: bool = True,
                 func: Handler | None = None) -> argparse.ArgumentParser:
        p = self.sub.add_parser(name, help=help_text, description=help_text)
        _add_verbosity(p, argparse.SUPPRESS)  # also after the command; keeps a value given before
        if config:
            p.add_argument("config", type=Path, help="campaign config (TOML)")
            _add_set(p)
        p.set_defaults(func=func or self.handlers[name])
        return p


def build_parser(handlers: Mapping[str, Handler]) -> argparse.ArgumentParser:
    """The parser of every command; ``handlers``: command name → its function (the injection
    commands bring their own)."""
    parser = argparse.ArgumentParser(
        prog="offline-iaas",
        description="Offline reprocessing of GW data with models served by Triton.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_verbosity(parser, False)
    command = AddCommand(parser.add_subparsers(dest="command", required=True,
                                               metavar="COMMAND"), handlers)
    _add_campaign_commands(command)
    _add_run_commands(command)
    _add_bench(command)
    _add_plan(command)
    _add_merge_and_tools(command)
    return parser


def count(text: str) -> int:
    """argparse type: a whole number, 0 or more (DAGMan's counts and codes)."""
    value = int(text)  # argparse turns the ValueError into "invalid count value"
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _add_campaign_commands(command: AddCommand) -> None:
    """What prepares a campaign: its data, injections, model repository and run directory."""
    p = command("synth", "write a synthetic GWF dataset and its LAL cache")
    p.add_argument("--out", type=Path, help="directory (default: data.frames)")
    from offline_iaas.search import injection_commands as inj

    inj.add_convert_arguments(command("convert-injections", inj.CONVERT_HELP, config=False,
                                      func=inj.cmd_convert))
    inj.add_draw_arguments(command("draw-injections", inj.DRAW_HELP, func=inj.cmd_draw))
    p = command("export", "build the Triton model repository (model.repository)")
    p.add_argument(
        "--weights", type=Path,
        help="trained weights: a directory of deepclean-<IFO>.* and bbhnet.* (what train-demo "
        "writes; classifier.pt in the classifier mode) or one file; optional in the classifier "
        "mode (default: seeded init)",
    )
    p.add_argument(
        "--flavor", choices=("cpu", "gpu"), default="cpu",
        help="cpu: the networks on the CPU (embedded server); gpu: the same model with its "
        "networks on CUDA (a Triton container on GPU nodes)",
    )
    p.add_argument(
        "--ensemble", action="store_true",
        help="serve each step as its own model behind an ensemble (Triton statistics per step) "
        "instead of the fused model (default, faster); with --flavor gpu, the native layout "
        "(onnxruntime backend, implicit state; classifier and bbhnet)",
    )
    p.add_argument(
        "--canary-weights", type=Path,
        help="with deepclean.canary = true: a second DeepClean per detector (like --weights), "
        "served beside the production one on the same windows",
    )
    p = command("train-demo",
                "train the demo DeepClean (per detector) and BBHnet on the synthetic dataset")
    p.add_argument("--out", type=Path, help="weights directory (default: beside data.frames)")
    p = command("make-dag", "plan the client shares and write the run directory")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--no-check", action="store_true",
                   help="do not open the frame files (they need not exist here): the coverage "
                   "comes from their names; for planning, not for running")
    p = command("check", "pre-flight check of the frames, segments and model "
                "repository (writes nothing)")
    p.description = (f"{p.description}. Lists every problem, one error each: a check runs "
                     "after a failed one unless it needs what that one would have found (the "
                     "injection list needs the frames); the exit code is the first problem's, "
                     "in the order config, frames, injection list, model repository.")


def _add_run_commands(command: AddCommand) -> None:
    """What runs a campaign's nodes, and watches and reports on the run."""
    p = command("run-local", "execute a run directory's DAG here", config=False)
    p.add_argument("run_dir", type=Path)
    nodes = {name: command(name, text, config=False) for name, text in (
        ("serve", "server node: run tritonserver and publish its address"),
        ("client", "client node: stream one client share to its server"),
    )}
    for p in nodes.values():
        p.add_argument("--run-dir", type=Path, required=True)
        p.add_argument("--node", required=True)
    p = nodes["serve"]
    p.add_argument("--repository", type=Path, help="model repository directory or tarball")
    p.add_argument("--rendezvous", choices=("file", "jobad"), default="file",
                   help="publish the address in servers/<node>.json or in the job ad")
    p = command("prescript", "DAG PRE script: fetch a client's server address "
                "(exit code 75: not known yet, run me again later)", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True)
    p = command("status", "per-node state, data seconds done and ETA of a run",
                config=False)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--verify", action="store_true", help="read every checksum")
    p.add_argument("--final", action="store_true",
                   help="FINAL node: write summary.json, fail if the DAG failed")
    p.add_argument("--dag-status", type=count, default=0, help="DAGMan's $(DAG_STATUS)")
    p.add_argument("--failed-count", type=count, default=0, help="DAGMan's $(FAILED_COUNT)")
    p = command("report", "write the campaign report RUN/report/index.html",
                config=False)
    p.add_argument("run_dir", type=Path)


def _add_bench(command: AddCommand) -> None:
    p = command("bench", "measure service, limit and naive throughput; write "
                "RESULTS.md, results.json and plots", config=False)
    p.add_argument("--out", type=Path, default=Path("benchmarks"), help="output directory")
    from offline_iaas.bench.workloads import DEFAULT_WORKLOADS, WORKLOADS

    p.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS),
                   choices=list(WORKLOADS))
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[8, 32, 128],
                   help="batch sizes swept at -k clients")
    p.add_argument("--clients", nargs="+", type=int, default=[1, 2, 4],
                   help="client counts swept at --batch-size")
    p.add_argument("--batch-size", type=int,
                   help="default point's batch size (default: each workload's own)")
    p.add_argument("-k", type=int, default=2, help="default point's clients")
    p.add_argument("--in-flight", type=int, default=4, help="requests in flight per client")
    p.add_argument("--repeats", type=int, default=3, help="repeats per path and point")
    p.add_argument("--instances", nargs="+", type=int, default=[1, 2],
                   help="server.instances of the served model swept (one onnxruntime thread "
                   "each); the batch sweep and the targets at the most")
    p.add_argument("--data-scale", type=float, default=1.0,
                   help="multiply the data streamed per measurement")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: serve the gpu flavor (networks on the GPU) and run the limit on "
                   "CUDA; cpu: the same steps on the CPU")
    p.add_argument("--work-dir", type=Path, help="keep repositories and logs here")
    p.add_argument("--report-only", action="store_true",
                   help="measure nothing: rewrite RESULTS.md and the plots from --out's "
                   "results.json")


def _add_plan(command: AddCommand) -> None:
    p = command("plan", "recommend servers, clients per server and batch size from "
                "measured throughput")
    p.add_argument("--target-hours", type=float, help="deadline of the campaign")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--from-bench", type=Path,
                        help="results.json of offline-iaas bench (default: the source tree's "
                        "benchmarks/results.json, wherever the command runs)")
    source.add_argument("--from-run", type=Path,
                        help="a finished pilot campaign of this config (its run directory)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--simulate", type=Path, metavar="RUN",
                   help="replay the DAG of this run directory (make-dag's; its own config, not "
                   "CONFIG) with the rates of --from-run and report the expected makespan")
    p.add_argument("--failure-rate", type=float,  # defaults: SIMULATE_OPTIONS
                   help="--simulate: probability that a client attempt fails (then retried; "
                   "default 0)")
    p.add_argument("--never-start", nargs="*", metavar="SERVER",
                   help="--simulate: servers that never start (their clients fail over)")
    p.add_argument("--replications", type=int,
                   help="--simulate: Monte Carlo repetitions with failures (1 to 10,000), "
                   "default 20")
    p.add_argument("--seed", type=int, help="--simulate: random seed (default 0)")


def _add_merge_and_tools(command: AddCommand) -> None:
    """The merge nodes, the in-process reference, the provenance and the demo."""
    p = command("merge", "merge node: check and stitch the parts (with shard "
                "merges: write their index)", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p = command("merge-shard", "shard merge node: merge one shard of GPS time",
                config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True, help="the shard merge node (shard0, ...)")
    p = command("merge-chunk", "deprecated: use merge-shard", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True, help="the shard merge node (shard0, ...)")
    p = command("reference",
                "run the whole span in one process (the reference the campaign must equal)")
    p.add_argument("--out", type=Path, required=True,
                   help="output HDF5 file (.h5, .hdf5); its summary goes beside it, .json")
    p = command("inspect", "print the provenance of a product: a cleaned GWF file "
                "(its frame history) or a campaign HDF5 file", config=False)
    p.add_argument("file", type=Path)
    p = command("demo", "synth, export, make-dag, run-local, reference, compare",
                config=False)
    p.add_argument("--workdir", type=Path, default=Path("demo-work"))
    p.add_argument("--config", type=Path, help="campaign config (default: the packaged demo)")
    p.add_argument("--mode", choices=BUILT_IN_MODES,
                   help="campaign mode (default: the config's; the packaged demo's is e2e)")
    p.add_argument("--weights", type=Path,
                   help="trained weights directory (default: train the demo networks)")
    _add_set(p)


def _add_verbosity(p: argparse.ArgumentParser, default) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="print only warnings and errors")
    group.add_argument("-v", "--verbose", action="store_true", default=default,
                       help="also print detail lines")


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
