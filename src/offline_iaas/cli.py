"""The ``offline-iaas`` command line. Error types map to exit codes here, and only here."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from offline_iaas import cli_parser, closed_stdout, full_disk_exit, logs
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

EXIT_INTERRUPTED = 130

logger = logging.getLogger("offline_iaas.cli")  # also when run as __main__
_verbosity = logs.NORMAL
"""Set by ``--quiet`` / ``--verbose``: the log level, and whether progress is shown."""


def _count_progress(label: str, unit: str):
    from offline_iaas.logs import CountProgress

    return CountProgress(label, unit, verbosity=_verbosity)


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
    from offline_iaas.workflow.status import report_command

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


COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "synth": cmd_synth, "export": cmd_export, "train-demo": cmd_train_demo,
    "make-dag": cmd_make_dag, "check": cmd_check, "run-local": cmd_run_local,
    "serve": cmd_serve, "client": cmd_client, "prescript": cmd_prescript,
    "status": cmd_status, "report": cmd_report, "bench": cmd_bench, "plan": cmd_plan,
    "merge": cmd_merge, "merge-shard": cmd_merge_shard, "merge-chunk": cmd_merge_chunk,
    "reference": cmd_reference, "inspect": cmd_inspect, "demo": cmd_demo,
}
"""Each command of ``cli_parser`` (but the injection commands, their module's) → its function."""


def build_parser() -> argparse.ArgumentParser:
    """The ``offline-iaas`` parser, each command's function its ``func`` default."""
    return cli_parser.build_parser(COMMANDS)


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
