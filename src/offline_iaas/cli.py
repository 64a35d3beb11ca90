"""The ``offline-iaas`` command line. Error types map to exit codes here, and only here."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from offline_iaas import __version__, closed_stdout, full_disk_exit, logs
from offline_iaas.atomic import output_directory
from offline_iaas.errors import (
    ERROR_FD_ENV,
    ConfigError,
    OfflineIaasError,
    RunError,
    SeveralErrors,
    exit_code,
    no_space,
    os_error_text,
)
from offline_iaas.gps import gps_span_text, gps_text
from offline_iaas.modes import BUILT_IN_MODES

EXIT_INTERRUPTED = 130

logger = logging.getLogger("offline_iaas.cli")  # also when run as __main__
_verbosity = logs.NORMAL
"""Set by ``--quiet`` / ``--verbose``: the log level, and whether progress is shown."""


def _count_progress(label: str, unit: str):
    from offline_iaas.logs import CountProgress

    return CountProgress(label, unit, verbosity=_verbosity)


def count(text: str) -> int:
    """argparse type: a whole number, 0 or more (DAGMan's counts and codes)."""
    value = int(text)  # argparse turns the ValueError into "invalid count value"
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _config(args: argparse.Namespace):
    from offline_iaas.config import load_config

    return load_config(args.config, args.set)


def _run(path: Path):
    """The run directory named on the command line, by its absolute path."""
    from offline_iaas.rundir import RunDir

    return RunDir(path.absolute())


def cmd_synth(args: argparse.Namespace) -> None:
    from offline_iaas.data.synth import write_synthetic_dataset

    summary = write_synthetic_dataset(_config(args), output_directory(args.out))
    logger.info(f"synth: wrote {len(summary['files'])} frame files to {summary['directory']}")
    snrs = [inj["network_snr"] for inj in summary["injections"]]
    logger.info(f"synth: {len(snrs)} {summary['injection_waveform']['approximant']} injections "
                f"({sum(s >= 8 for s in snrs)} of network SNR >= 8) in "
                f"{summary['injection_file']}")


def cmd_export(args: argparse.Namespace) -> None:
    from offline_iaas.manifest import read_manifest
    from offline_iaas.repository.export import export_repository

    repo = export_repository(_config(args), args.weights, args.flavor, args.ensemble,
                             args.canary_weights)
    manifest = read_manifest(repo)
    versions = ", ".join(f"{name} v{v}" for name, v in manifest.versions.items())
    logger.info(f"export: {repo} (mode {manifest.mode}, {manifest.flavor} flavor, "
        f"{manifest.served} model: {versions})")


def cmd_train_demo(args: argparse.Namespace) -> None:
    from offline_iaas.models.training import default_weights_dir, train_demo

    config = _config(args)
    out = output_directory(args.out or default_weights_dir(config.data, config.source))
    paths = train_demo(config, out)
    logger.info(f"train-demo: wrote {', '.join(str(p) for p in paths.values())}")


def cmd_make_dag(args: argparse.Namespace) -> None:
    config = _config(args)  # a config's mistake is told before the planning code loads
    from offline_iaas.workflow.make_dag import make_dag

    run = _run(output_directory(args.out))
    shares = make_dag(config, run, check_files=not args.no_check)
    logger.info(f"make-dag: {run.dag}")
    stride = config.stride_seconds
    for c in shares:
        pieces = ", ".join(
            f"GPS {gps_span_text(p.gps_start, p.gps_end)} (sequence {p.sequence_id})"
            for p in c.pieces
        )
        logger.info(
            f"  {c.node} -> {c.server}: {c.kept_windows * stride:.1f} s of output: {pieces}"
        )


def cmd_check(args: argparse.Namespace) -> None:
    config = _config(args)  # a config's mistake is told before the checks' code loads
    from offline_iaas.data.discovery import frame_source
    from offline_iaas.data.frame_types import frame_counts_text
    from offline_iaas.serve.startup_checks import Checking, run_checks

    checking = run_checks(Checking("check", config))
    frames, span, repository = checking.frames, checking.span, config.model.repository
    assert span is not None
    counts = frame_counts_text(frames)
    for f in frames:
        logger.debug(f"check: frame {f.path} (GPS {gps_text(f.gps_start)}+{f.duration:.0f} s)")
    logger.info(f"check: {len(config.data.channels)} channel(s): {', '.join(config.data.channels)}")
    logger.info(f"check: {len(frames)} frame file(s) ({counts}) from {frame_source(config.data)}")
    for line in span.summary_lines():
        logger.info(f"check: {line}")
    if checking.manifest is not None:
        logger.info(f"check: model repository {repository} fits the campaign")
    else:
        logger.info(f"check: no model repository at {repository} yet (model.repository): "
                       "export it before make-dag, which checks it")
    logger.info("check: OK")


def cmd_run_local(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.local import run_local
    from offline_iaas.workflow.progress import RunProgress

    # a live display on a terminal, plain lines otherwise (only warnings when quiet)
    with RunProgress(interactive=False if _verbosity <= logs.QUIET else None) as progress:
        run_local(_run(args.run_dir), on_state=progress.update)


def cmd_report(args: argparse.Namespace) -> None:
    from offline_iaas.report.build import report_command

    report_command(_run(args.run_dir))


def cmd_serve(args: argparse.Namespace) -> None:
    from offline_iaas.serve.node import serve

    serve(
        _run(args.run_dir), args.node, repository=args.repository, rendezvous=args.rendezvous
    )


def cmd_prescript(args: argparse.Namespace) -> None:
    from offline_iaas.rendezvous.prescript import DEFER_EXIT, prescript

    if not prescript(_run(args.run_dir), args.node):
        raise SystemExit(DEFER_EXIT)  # DAGMan runs the script again later (SCRIPT DEFER)


def cmd_status(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.status import final_summary, print_status

    if args.final:
        final_summary(_run(args.run_dir), args.dag_status, args.failed_count)
    else:
        print_status(_run(args.run_dir), as_json=args.json, verify=args.verify)


def cmd_client(args: argparse.Namespace) -> None:
    from offline_iaas.client.node import run_client

    with _count_progress(args.node, "data-s") as progress:  # a bar on a terminal
        run_client(_run(args.run_dir), args.node, progress=progress)


def cmd_merge(args: argparse.Namespace) -> None:
    from offline_iaas.merge.merge import merge

    with _count_progress("merge", "windows") as progress:  # a bar on a terminal
        merge(_run(args.run_dir), progress=progress)


def cmd_bench(args: argparse.Namespace) -> None:
    from offline_iaas.bench.run import run_bench
    from offline_iaas.bench.sweep import DEFAULT_DATA_SECONDS, SweepPlan

    plan = SweepPlan(
        workloads=tuple(args.workloads),
        batch_sizes=tuple(args.batch_sizes),
        clients=tuple(args.clients),
        default_batch_size=args.batch_size,
        default_clients=args.k,
        in_flight=args.in_flight,
        repeats=args.repeats,
        instances=tuple(args.instances),
        data_seconds={k: v * args.data_scale for k, v in DEFAULT_DATA_SECONDS.items()},
        device=args.device,
    )
    if args.report_only:
        from offline_iaas.bench.run import write_report

        written = write_report(args.out, redrawn=True)
        logger.info(f"bench: rewrote {written} from {args.out / 'results.json'}")
        return
    run_bench(plan, args.out, _bench_command(args), work_dir=args.work_dir)


def _bench_command(args: argparse.Namespace) -> str:
    """The bench command line that reproduces ``args`` (options left at default omitted)."""
    defaults = build_parser().parse_args(["bench"])
    words = ["offline-iaas", "bench"]
    for key, value in sorted(vars(args).items()):
        if key in ("func", "command") or value == getattr(defaults, key, value):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag)
        elif isinstance(value, list | tuple):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return " ".join(words)


def cmd_merge_shard(args: argparse.Namespace) -> None:
    from offline_iaas.merge.shard_merge import merge_shard

    with _count_progress("merge-shard", "windows") as progress:
        merge_shard(_run(args.run_dir), args.node, progress=progress)


def cmd_merge_chunk(args: argparse.Namespace) -> None:
    """``merge-chunk``, the name of ``merge-shard`` before the #38 glossary (deprecated)."""
    logger.warning("offline-iaas merge-chunk is deprecated: use offline-iaas merge-shard")
    cmd_merge_shard(args)


SIMULATE_OPTIONS: tuple[tuple[str, str, object], ...] = (
    ("--failure-rate", "failure_rate", 0.0), ("--never-start", "never_start", []),
    ("--replications", "replications", 20), ("--seed", "seed", 0))
"""``plan``'s options of ``--simulate`` alone: (option, attribute, default). Not given
(None), they take the default with ``--simulate`` and are refused without it."""


def cmd_plan(args: argparse.Namespace) -> None:
    import json

    from offline_iaas.bench.results import default_results
    from offline_iaas.sizing.pilot import read_pilot
    from offline_iaas.sizing.plan import plan_from_bench, plan_from_run

    if args.simulate is not None:
        from offline_iaas.sizing.simulate_command import simulate_command

        for _, value, default in SIMULATE_OPTIONS:
            setattr(args, value, default if getattr(args, value) is None else getattr(args, value))
        simulate_command(args, _run(args.simulate),
                         None if args.from_run is None else _run(args.from_run))
        return
    ignored = [option for option, value, _ in SIMULATE_OPTIONS if getattr(args, value) is not None]
    if ignored:
        raise ConfigError(f"plan {ignored[0]} needs --simulate RUN (it sets the failures the "
                          "simulation replays; a plan without --simulate has none)")
    if args.target_hours is None:
        raise ConfigError("plan needs --target-hours (or --simulate RUN --from-run PILOT)")
    if args.from_run is not None:
        pilot = read_pilot(_run(args.from_run))
        capacity = plan_from_run(_config(args), args.target_hours, pilot)
    else:
        capacity = plan_from_bench(_config(args), args.target_hours,
                                   args.from_bench or default_results())
    if args.json:
        print(json.dumps(capacity.to_dict(), indent=2))
        return
    for line in capacity.explanation:
        logger.info(f"plan: {line}")
    for line in capacity.warnings:
        logger.warning(f"plan: warning: {line}")
    logger.info(
        f"plan: recommend servers={capacity.servers} "
        f"clients_per_server={capacity.clients_per_server} batch_size={capacity.batch_size} "
        f"instances={capacity.instances}: "
        + " ".join(f"--set {o}" for o in capacity.overrides())
    )


def cmd_reference(args: argparse.Namespace) -> None:
    from offline_iaas.merge.reference import run_reference
    from offline_iaas.search.injection_file import HDF5_SUFFIXES

    if not args.out.name.lower().endswith(HDF5_SUFFIXES):
        raise ConfigError(f"reference --out {args.out}: must end in .h5 or .hdf5 (the HDF5 "
                          "output; its physics summary goes beside it, <out>.json)")
    path, wall = run_reference(_config(args), args.out)
    logger.info(f"reference: {path} in {wall:.1f} s")


def cmd_inspect(args: argparse.Namespace) -> None:
    import json

    from offline_iaas.merge.provenance import read_provenance

    print(json.dumps(read_provenance(args.file), indent=2, sort_keys=True))


def cmd_demo(args: argparse.Namespace) -> None:
    from offline_iaas.demo import run_demo

    run_demo(args.workdir, args.config, args.set, mode=args.mode, weights=args.weights)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offline-iaas",
        description="Offline reprocessing of GW data with models served by Triton.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable, help_text: str, config: bool = True):
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_verbosity(p, argparse.SUPPRESS)  # also after the command; keeps a value given before
        if config:
            p.add_argument("config", type=Path, help="campaign config (TOML)")
            _add_set(p)
        p.set_defaults(func=func)
        return p

    p = command("synth", cmd_synth, "write a synthetic GWF dataset and its LAL cache")
    p.add_argument("--out", type=Path, help="directory (default: data.frames)")
    from offline_iaas.search import injection_commands as inj

    inj.add_convert_arguments(command("convert-injections", inj.cmd_convert, inj.CONVERT_HELP,
                                      config=False))
    inj.add_draw_arguments(command("draw-injections", inj.cmd_draw, inj.DRAW_HELP))
    p = command("export", cmd_export, "build the Triton model repository (model.repository)")
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
    p = command("train-demo", cmd_train_demo,
                "train the demo DeepClean (per detector) and BBHnet on the synthetic dataset")
    p.add_argument("--out", type=Path, help="weights directory (default: beside data.frames)")
    p = command("make-dag", cmd_make_dag, "plan the client shares and write the run directory")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--no-check", action="store_true",
                   help="do not open the frame files (they need not exist here): the coverage "
                   "comes from their names; for planning, not for running")
    p = command("check", cmd_check, "pre-flight check of the frames, segments and model "
                "repository (writes nothing)")
    p.description = (f"{p.description}. Lists every problem, one error each: a check runs "
                     "after a failed one unless it needs what that one would have found (the "
                     "injection list needs the frames); the exit code is the first problem's, "
                     "in the order config, frames, injection list, model repository.")
    p = command("run-local", cmd_run_local, "execute a run directory's DAG here", config=False)
    p.add_argument("run_dir", type=Path)
    for name, func, text in (
        ("serve", cmd_serve, "server node: run tritonserver and publish its address"),
        ("client", cmd_client, "client node: stream one client share to its server"),
    ):
        p = command(name, func, text, config=False)
        p.add_argument("--run-dir", type=Path, required=True)
        p.add_argument("--node", required=True)
    p = sub.choices["serve"]
    p.add_argument("--repository", type=Path, help="model repository directory or tarball")
    p.add_argument("--rendezvous", choices=("file", "jobad"), default="file",
                   help="publish the address in servers/<node>.json or in the job ad")
    p = command("prescript", cmd_prescript, "DAG PRE script: fetch a client's server address "
                "(exit code 75: not known yet, run me again later)", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True)
    p = command("status", cmd_status, "per-node state, data seconds done and ETA of a run",
                config=False)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--verify", action="store_true", help="read every checksum")
    p.add_argument("--final", action="store_true",
                   help="FINAL node: write summary.json, fail if the DAG failed")
    p.add_argument("--dag-status", type=count, default=0, help="DAGMan's $(DAG_STATUS)")
    p.add_argument("--failed-count", type=count, default=0, help="DAGMan's $(FAILED_COUNT)")
    p = command("report", cmd_report, "write the campaign report RUN/report/index.html",
                config=False)
    p.add_argument("run_dir", type=Path)
    p = command("bench", cmd_bench, "measure service, limit and naive throughput; write "
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
    p = command("plan", cmd_plan, "recommend servers, clients per server and batch size from "
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
    p = command("merge", cmd_merge, "merge node: check and stitch the parts (with shard "
                "merges: write their index)", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p = command("merge-shard", cmd_merge_shard, "shard merge node: merge one shard of GPS time",
                config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True, help="the shard merge node (shard0, ...)")
    p = command("merge-chunk", cmd_merge_chunk, "deprecated: use merge-shard", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--node", required=True, help="the shard merge node (shard0, ...)")
    p = command("reference", cmd_reference,
                "run the whole span in one process (the reference the campaign must equal)")
    p.add_argument("--out", type=Path, required=True,
                   help="output HDF5 file (.h5, .hdf5); its summary goes beside it, .json")
    p = command("inspect", cmd_inspect, "print the provenance of a product: a cleaned GWF file "
                "(its frame history) or a campaign HDF5 file", config=False)
    p.add_argument("file", type=Path)
    p = command("demo", cmd_demo, "synth, export, make-dag, run-local, reference, compare",
                config=False)
    p.add_argument("--workdir", type=Path, default=Path("demo-work"))
    p.add_argument("--config", type=Path, help="campaign config (default: the packaged demo)")
    p.add_argument("--mode", choices=BUILT_IN_MODES,
                   help="campaign mode (default: the config's; the packaged demo's is e2e)")
    p.add_argument("--weights", type=Path,
                   help="trained weights directory (default: train the demo networks)")
    _add_set(p)
    return parser


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


def main(argv: list[str] | None = None) -> int:
    global _verbosity
    args = build_parser().parse_args(argv)
    _verbosity = logs.QUIET if args.quiet else logs.VERBOSE if args.verbose else logs.NORMAL
    logs.configure(_verbosity)
    full_disk_exit.quiet_dealloc_errors()
    try:
        args.func(args)
    except KeyboardInterrupt:
        _last_line(f"offline-iaas {args.command}: interrupted")
        return EXIT_INTERRUPTED
    except Exception as err:
        if closed_stdout.reader_gone(err):  # `| head -1`: the reader has what it wanted
            return closed_stdout.leave_quietly()
        where = getattr(args, "run_dir", None) or getattr(args, "out", None)
        error = failure(err, Path(where).absolute() if where is not None else None)
        if error is None:  # a bug: it keeps its traceback
            raise
        for text in error_texts(error):
            _last_line(f"offline-iaas {args.command}: error: {text}")
        if argv is None and no_space(err) is not None:  # the process's own command line
            full_disk_exit.leave(exit_code(error))  # not by SIGSEGV in HDF5's exit handler
        return exit_code(error)
    finally:
        _flush_streams()
    return 0


def failure(err: Exception, where: Path | None = None) -> OfflineIaasError | None:
    """The error type a command's exception maps to (its exit code), or None for a bug.

    A full disk or spent quota anywhere is a ``NoSpaceError`` naming the file, else ``where``
    (the run directory or output of the command); another ``OSError`` that no check turned
    into one of the types (a permission denied, a path that cannot be created, a network
    filesystem going away) is the user's to fix: a ``RunError``, one line.
    """
    full = no_space(err, fallback=where)
    if full is not None:
        return full
    if isinstance(err, OfflineIaasError):
        return err
    if isinstance(err, OSError):
        return RunError(os_error_text(err))
    return None


def _last_line(line: str) -> None:
    """Print a command's last line on stderr, and into run-local's error pipe for the node
    (``ERROR_FD_ENV``), which a full disk cannot take."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
    descriptor = os.environ.get(ERROR_FD_ENV, "")
    if descriptor.isdigit():
        try:
            os.write(int(descriptor), f"{line}\n".encode())
        except OSError:
            pass


def _flush_streams() -> None:
    """Flush stdout and stderr; one a full disk cannot take is replaced by ``/dev/null``, so
    that Python's exit does not turn the exit code into 120 over a log line."""
    for name in ("stdout", "stderr"):
        try:
            getattr(sys, name).flush()
        except OSError:
            setattr(sys, name, open(os.devnull, "w"))  # open until the process exits
        except (AttributeError, ValueError):  # closed, or replaced by a test
            pass


def error_texts(err: OfflineIaasError) -> list[str]:
    """The message of each error ``err`` holds (``SeveralErrors``: each of its errors, in
    order; else ``err`` alone), as ``error_text`` gives it."""
    errors = err.errors if isinstance(err, SeveralErrors) else (err,)
    return [error_text(e) for e in errors]


def error_text(err: OfflineIaasError) -> str:
    """The message of an error for stderr: one line, or a summary line and ``  - `` items.

    A message with other line breaks (one quoting a library's multi-line error) is joined
    into one line.
    """
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    raw = str(err).strip().splitlines()
    if len(raw) > 1 and all(line.startswith("  - ") for line in raw[1:]):
        return "\n".join(raw)  # a list of problems, one per line (preflight)
    return " ".join(lines)


if __name__ == "__main__":
    sys.exit(main())
