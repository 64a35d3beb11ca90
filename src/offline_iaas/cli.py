"""The ``offline-iaas`` command line. Error types map to exit codes here, and only here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from offline_iaas import __version__
from offline_iaas.errors import OfflineIaasError, RunError

EXIT_INTERRUPTED = 130


def log(message: str) -> None:
    print(message, flush=True)


def _config(args: argparse.Namespace):
    from offline_iaas.config import load_config

    return load_config(args.config, args.set)


def cmd_synth(args: argparse.Namespace) -> None:
    from offline_iaas.data.synth import write_synthetic_dataset

    summary = write_synthetic_dataset(_config(args), args.out)
    log(f"synth: wrote {len(summary['files'])} frame files to {summary['directory']}")


def cmd_export(args: argparse.Namespace) -> None:
    from offline_iaas.repository.export import export_repository, read_manifest

    repo = export_repository(_config(args), args.weights, args.flavor)
    manifest = read_manifest(repo)
    versions = ", ".join(f"{name} v{v}" for name, v in manifest["versions"].items())
    log(f"export: {repo} (mode {manifest['mode']}, {manifest['flavor']} flavor: {versions})")


def cmd_train_demo(args: argparse.Namespace) -> None:
    from offline_iaas.models.training import default_weights_dir, train_demo

    config = _config(args)
    paths = train_demo(config, args.out or default_weights_dir(config), log=log)
    log(f"train-demo: wrote {', '.join(str(p) for p in paths.values())}")


def cmd_make_dag(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.make_dag import make_dag

    config = _config(args)
    segments = make_dag(config, args.out, log=log)
    log(f"make-dag: {args.out.resolve() / 'offline.dag'}")
    stride = config.stride_samples / config.data.sample_rate
    for seg in segments:
        pieces = ", ".join(
            f"GPS {p.gps_start:.3f}-{p.gps_end:.3f} (sequence {p.sequence_id})" for p in seg.pieces
        )
        log(f"  {seg.node} -> {seg.server}: {seg.kept_windows * stride:.1f} s of output: {pieces}")


def cmd_check(args: argparse.Namespace) -> None:
    from offline_iaas.data.frames import discover_frames, frame_source, preflight

    config = _config(args)
    frames = discover_frames(config)
    span = preflight(config, frames)
    per_obs: dict[str, int] = {}
    for f in frames:
        per_obs[f.observatory] = per_obs.get(f.observatory, 0) + 1
    counts = ", ".join(f"{obs}: {n}" for obs, n in sorted(per_obs.items()))
    log(f"check: {len(config.data.channels)} channel(s): {', '.join(config.data.channels)}")
    log(f"check: {len(frames)} frame file(s) ({counts}) from {frame_source(config)}")
    for line in span.summary_lines():
        log(f"check: {line}")
    log("check: OK")


def cmd_run_local(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.local import run_local
    from offline_iaas.workflow.progress import RunProgress

    with RunProgress() as progress:  # a live display on a terminal, plain lines otherwise
        run_local(args.run_dir, log=progress.log, on_state=progress.update)


def cmd_report(args: argparse.Namespace) -> None:
    from offline_iaas.report import write_report

    write_report(args.run_dir, log=log)


def cmd_serve(args: argparse.Namespace) -> None:
    from offline_iaas.serve.node import serve

    serve(
        args.run_dir, args.node, log=log, repository=args.repository, rendezvous=args.rendezvous
    )


def cmd_prescript(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.prescript import DEFER_EXIT, prescript

    if not prescript(args.run_dir, args.node, log=log):
        raise SystemExit(DEFER_EXIT)  # DAGMan runs the script again later (SCRIPT DEFER)


def cmd_status(args: argparse.Namespace) -> None:
    from offline_iaas.workflow.status import final_summary, print_status

    if args.final:
        final_summary(args.run_dir, args.dag_status, args.failed_count, log=log)
    else:
        print_status(args.run_dir, log=log, as_json=args.json)


def cmd_client(args: argparse.Namespace) -> None:
    from offline_iaas.client.stream import run_client

    run_client(args.run_dir, args.node, log=log)


def cmd_merge(args: argparse.Namespace) -> None:
    from offline_iaas.merge.merge import merge

    merge(args.run_dir, log=log)


def cmd_reference(args: argparse.Namespace) -> None:
    from offline_iaas.reference import run_reference

    path, wall = run_reference(_config(args), args.out, log)
    log(f"reference: {path} in {wall:.1f} s")


def cmd_demo(args: argparse.Namespace) -> None:
    from offline_iaas.demo import run_demo

    run_demo(args.workdir, args.config, args.set, log=log)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offline-iaas",
        description="Offline reprocessing of GW data with models served by Triton.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable, help_text: str, config: bool = True):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if config:
            p.add_argument("config", type=Path, help="campaign config (TOML)")
            _add_set(p)
        p.set_defaults(func=func)
        return p

    p = command("synth", cmd_synth, "write a synthetic GWF dataset and its LAL cache")
    p.add_argument("--out", type=Path, help="directory (default: data.frames)")
    p = command("export", cmd_export, "build the Triton model repository (model.repository)")
    p.add_argument(
        "--weights", type=Path,
        help="trained weights: a directory of deepclean-<IFO>.* and bbhnet.* (what train-demo "
        "writes) or one file; optional in the classifier mode (default: seeded init)",
    )
    p.add_argument(
        "--flavor", choices=("cpu", "gpu"), default="cpu",
        help="cpu: python backend (embedded server); gpu: onnxruntime backend, implicit state",
    )
    p = command("train-demo", cmd_train_demo,
                "train the demo DeepClean (per detector) and BBHnet on the synthetic dataset")
    p.add_argument("--out", type=Path, help="weights directory (default: beside data.frames)")
    p = command("make-dag", cmd_make_dag, "plan the segments and write the run directory")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    command("check", cmd_check, "pre-flight check of the frames and segments (writes nothing)")
    p = command("run-local", cmd_run_local, "execute a run directory's DAG here", config=False)
    p.add_argument("run_dir", type=Path)
    for name, func, text in (
        ("serve", cmd_serve, "server node: run tritonserver and publish its address"),
        ("client", cmd_client, "client node: stream one segment to its server"),
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
    p.add_argument("--final", action="store_true",
                   help="FINAL node: write summary.json, fail if the DAG failed")
    p.add_argument("--dag-status", type=int, default=0, help="DAGMan's $(DAG_STATUS)")
    p.add_argument("--failed-count", type=int, default=0, help="DAGMan's $(FAILED_COUNT)")
    p = command("report", cmd_report, "write the campaign report RUN/report/index.html",
                config=False)
    p.add_argument("run_dir", type=Path)
    p = command("merge", cmd_merge, "merge node: check and stitch the parts", config=False)
    p.add_argument("--run-dir", type=Path, required=True)
    p = command("reference", cmd_reference, "run the whole span in one process (the oracle)")
    p.add_argument("--out", type=Path, required=True, help="output HDF5 file")
    p = command("demo", cmd_demo, "synth, export, make-dag, run-local, reference, compare",
                config=False)
    p.add_argument("--workdir", type=Path, default=Path("demo-work"))
    p.add_argument("--config", type=Path, help="campaign config (default: the packaged demo)")
    _add_set(p)
    return parser


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except OfflineIaasError as err:
        print(f"offline-iaas {args.command}: error: {error_text(err)}", file=sys.stderr,
              flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"offline-iaas {args.command}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except OSError as err:
        # A file-system or network problem no check foresaw (permissions, a full disk, a path
        # that cannot be created): the user's to fix, so one line and RunError's code. Any
        # other unexpected exception is a bug and keeps its traceback.
        print(f"offline-iaas {args.command}: error: {os_error_text(err)}", file=sys.stderr,
              flush=True)
        return RunError.exit_code
    return 0


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


def os_error_text(err: OSError) -> str:
    """One line for an OSError: what failed, and on which path(s)."""
    text = str(err).strip()
    what = err.strerror or (text.splitlines()[0] if text else type(err).__name__)
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    return f"{what}: {' -> '.join(paths)}" if paths else what


if __name__ == "__main__":
    sys.exit(main())
