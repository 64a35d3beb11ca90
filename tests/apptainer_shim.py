"""A stand-in for the ``apptainer`` executable, for machines without Apptainer.

Put on PATH as ``apptainer`` (see ``install_shim``). It records every call (argv and the
environment it was given) in ``$APPTAINER_SHIM_DIR/calls.jsonl`` and plays the commands that
``offline_iaas.serve.container`` uses:

* ``--version``;
* ``instance start [--nv] [--bind host:container[:opts]]... IMAGE NAME``: remembers the
  instance (the image must exist unless it is a ``docker://`` URI);
* ``instance list --json [NAME]``;
* ``instance stop [-t N] NAME``;
* ``exec [--cleanenv] [--env K=V]... instance://NAME tritonserver ARGS``: maps the instance's
  bind mounts back to host paths in ARGS and ``exec``s the native tritonserver (the one
  ``locate_tritonserver`` finds, with its backend directory), so the process that the node
  started *is* tritonserver, as under Apptainer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def shim_dir() -> Path:
    path = Path(os.environ.get("APPTAINER_SHIM_DIR", "/tmp/apptainer-shim"))
    (path / "instances").mkdir(parents=True, exist_ok=True)
    return path


def record(argv: list[str]) -> None:
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "_CONDOR_AssignedGPUs")
           if k in os.environ}
    with open(shim_dir() / "calls.jsonl", "a") as f:
        f.write(json.dumps({"argv": argv, "env": env}) + "\n")


def fail(message: str) -> None:
    print(f"FATAL:   {message}", file=sys.stderr)
    sys.exit(255)


def instance_start(args: list[str]) -> None:
    binds, nv, rest = [], False, []
    i = 0
    while i < len(args):
        if args[i] in ("--bind", "-B"):
            binds.append(args[i + 1])
            i += 2
        elif args[i] == "--nv":
            nv, i = True, i + 1
        elif args[i].startswith("-"):
            i += 1
        else:
            rest.append(args[i])
            i += 1
    if len(rest) != 2:
        fail("instance start needs IMAGE NAME")
    image, name = rest
    if not image.startswith("docker://") and not Path(image).exists():
        fail(f"could not open image {image}: no such file or directory")
    for bind in binds:
        if not Path(bind.split(":")[0]).exists():
            fail(f"bind source {bind} does not exist")
    state = {"image": image, "binds": binds, "nv": nv, "pid": os.getpid()}
    (shim_dir() / "instances" / f"{name}.json").write_text(json.dumps(state))
    print("INFO:    instance started successfully")


def instance_list(args: list[str]) -> None:
    names = [a for a in args if not a.startswith("-")]
    found = []
    for path in sorted((shim_dir() / "instances").glob("*.json")):
        if names and path.stem not in names:
            continue
        state = json.loads(path.read_text())
        found.append({"instance": path.stem, "pid": state["pid"], "img": state["image"]})
    print(json.dumps({"instances": found}))


def instance_stop(args: list[str]) -> None:
    names = [a for a in args if not a.startswith("-") and not a.isdigit()]
    for name in names:
        path = shim_dir() / "instances" / f"{name}.json"
        if not path.exists():
            fail(f"no instance found with name {name}")
        path.unlink()
        print(f"INFO:    Stopping {name} instance")


def exec_in_instance(args: list[str]) -> None:
    env_extra, cleanenv, i = {}, False, 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--env":
            key, _, value = args[i + 1].partition("=")
            env_extra[key] = value
            i += 2
        else:
            cleanenv = cleanenv or args[i] == "--cleanenv"
            i += 1
    target, command = args[i], args[i + 1 :]
    if not target.startswith("instance://"):
        fail("the shim only runs commands in instances (instance://NAME)")
    path = shim_dir() / "instances" / f"{target[len('instance://'):]}.json"
    if not path.exists():
        fail(f"no instance {target}")
    state = json.loads(path.read_text())
    mounts = []
    for bind in state["binds"]:
        host, container = bind.split(":")[:2]
        mounts.append((container, host))

    def to_host(word: str) -> str:
        for container, host in mounts:
            word = word.replace(f"={container}", f"={host}")
            if word == container or word.startswith(container + "/"):
                word = host + word[len(container) :]
        return word

    command = [to_host(word) for word in command]
    if not command or command[0] != "tritonserver":
        fail(f"the shim runs only tritonserver, not {command[:1]}")
    from offline_iaas.serve.tritonserver import locate_tritonserver

    install = locate_tritonserver()
    argv = [str(install.binary), *command[1:]]
    if install.backend_dir is not None:
        argv.append(f"--backend-directory={install.backend_dir}")
    base = {k: os.environ[k] for k in ("HOME", "USER", "TMPDIR") if k in os.environ}
    env = {**(base if cleanenv else os.environ), **install.env, **env_extra}
    os.execve(argv[0], argv, env)


GLOBAL_FLAGS = {"--quiet", "-q", "--debug", "-d", "--silent", "-s", "--verbose", "-v"}


def main(argv: list[str]) -> None:
    record(argv)
    while argv and argv[0] in GLOBAL_FLAGS:
        argv = argv[1:]
    if argv[:1] == ["--version"]:
        print("apptainer version 1.3.6-shim")
    elif argv[:2] == ["instance", "start"]:
        instance_start(argv[2:])
    elif argv[:2] == ["instance", "list"]:
        instance_list(argv[2:])
    elif argv[:2] == ["instance", "stop"]:
        instance_stop(argv[2:])
    elif argv[:1] == ["exec"]:
        exec_in_instance(argv[1:])
    else:
        fail(f"the shim does not know {' '.join(argv[:2])}")


def install_shim(bin_dir: Path, name: str = "apptainer") -> Path:
    """Write an executable ``bin_dir/<name>`` that runs this shim with this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    root = Path(__file__).resolve().parents[1]
    path.write_text(
        f"#!/bin/sh\nPYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} "
        f'exec {sys.executable} {Path(__file__).resolve()} "$@"\n'
    )
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
