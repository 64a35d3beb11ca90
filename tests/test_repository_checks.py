"""The model repository checked against the campaign before anything runs (issue #30).

``make-dag`` and ``check`` refuse a repository that does not fit: another mode, too few
sequence slots for the layout, other time slides, another whitening, another rate or window,
another model name, or a graph onnxruntime cannot load (a half-copied file). Each mismatch is
one line naming the config key or the file, exit code 4, and no DAG is written. A server
whose repository goes bad after planning publishes why it refuses to serve, and its clients
fail within seconds with that reason instead of waiting ``client.server_wait_seconds``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import RunError
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import cli_error, documented
from tests.helpers import SMALL_CAMPAIGN, processes_mentioning, untrained_weights

BBHNET = ['model.mode="bbhnet"']


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SMALL_CAMPAIGN's frames and repositories: classifier (2 clients per server) and
    bbhnet without time slides."""
    from offline_iaas.data.synth import write_synthetic_dataset

    root = tmp_path_factory.mktemp("repository-checks")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml")
    write_synthetic_dataset(config)
    export_repository(config)
    weights = untrained_weights(root / "weights")
    bbhnet = load_config(root / "campaign.toml",
                         [*BBHNET, f'model.repository="{root / "bbhnet-repository"}"'])
    export_repository(bbhnet, weights)
    return root


def make_dag_cli(ws: Path, run: str, *overrides: str) -> int:
    args = ["make-dag", str(ws / "campaign.toml"), "--out", str(ws / run)]
    for override in overrides:
        args += ["--set", override]
    return main(args)


@pytest.mark.parametrize(("row", "overrides", "lines"), [
    ("repository-too-few-slots", ["layout.clients_per_server=9"],
     ["model repository {ws}/model-repository: exported with 8 sequence slots, the campaign "
      "runs 9 clients per server (layout.clients_per_server;"]),
    ("repository-other-time-slides",
     [*BBHNET, 'model.repository="{ws}/bbhnet-repository"', "search.slides=3"],
     ["model repository {ws}/bbhnet-repository: exported with 0 time slides of 0 samples, the "
      "campaign asks for 3 of 256 (search.slides, search.slide_seconds): export again"]),
    ("repository-other-mode", ['model.mode="bbhnet"'],
     ["model repository {ws}/model-repository: exported for mode 'classifier', the campaign "
      "runs mode 'bbhnet' (model.mode)"]),
    ("repository-other-rate-and-window", ["data.sample_rate=128", "model.kernel_seconds=2"],
     ["model repository {ws}/model-repository: exported for 256 Hz, the campaign reads "
      "128 Hz (data.sample_rate)",
      "model repository {ws}/model-repository: exported for windows of 64 samples "
      "(stride_samples), the campaign's are 32 (model.inference_rate)"]),
    ("repository-other-model-name", ['model.name="another"'],
     ["model repository {ws}/model-repository: holds model 'offline-iaas', the campaign calls "
      "'another' (model.name)"]),
])
def test_make_dag_refuses_a_repository_that_does_not_fit(
    ws: Path, capsys, row: str, overrides: list[str], lines: list[str],
) -> None:
    run = f"run-{abs(hash(tuple(overrides)))}"
    code = make_dag_cli(ws, run, *(o.format(ws=ws) for o in overrides))
    err = capsys.readouterr().err
    assert code == 4, err
    for line in lines:
        assert line.format(ws=ws) in err
    assert len([line for line in err.splitlines() if line.strip()]) == (
        1 if len(lines) == 1 else len(lines) + 1)  # a summary line, then one per problem
    documented(row, cli_error(err), {ws: "<ws>"}, exit_code=code)
    assert not (ws / run / "offline.dag").exists()


def test_make_dag_refuses_a_half_copied_graph_and_check_too(ws: Path, tmp_path: Path,
                                                            capsys) -> None:
    import shutil

    repo = tmp_path / "half-copied"
    shutil.copytree(ws / "bbhnet-repository", repo)
    (graph,) = repo.rglob("bbhnet.onnx")
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    overrides = [*BBHNET, f'model.repository="{repo}"']
    assert make_dag_cli(ws, "run-half", *overrides) == 4
    err = capsys.readouterr().err
    documented("repository-graph-half-copied", cli_error(err), {repo: "R"}, exit_code=4)
    assert f"{graph}: onnxruntime cannot load the bbhnet graph" in err
    assert "a half-copied repository? export again" in err
    assert not (ws / "run-half" / "offline.dag").exists()
    args = ["check", str(ws / "campaign.toml")]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 4
    assert f"{graph}: onnxruntime cannot load the bbhnet graph" in capsys.readouterr().err
    # the whole repository passes both
    assert make_dag_cli(ws, "run-good", *BBHNET,
                        f'model.repository="{ws / "bbhnet-repository"}"') == 0
    assert (ws / "run-good" / "offline.dag").exists()


def test_make_dag_names_a_served_file_missing_or_changed_since_the_export(
        ws: Path, tmp_path: Path, capsys) -> None:
    """A python model's ``model.py`` deleted, or its ``config.pbtxt`` overwritten: tritonserver
    would fail to load the model and its clients wait for a server that never gets ready.
    The manifest records every served file's SHA-256 (``Manifest.files``)."""
    import json
    import shutil

    repo = tmp_path / "damaged"
    shutil.copytree(ws / "bbhnet-repository", repo)
    recorded = json.loads((repo / "manifest.json").read_text())["files"]
    assert {"offline-iaas/config.pbtxt", "offline-iaas/1/model.py",
            "offline-iaas/1/stateful.py"} <= set(recorded)
    model_py = repo / "offline-iaas" / "1" / "model.py"
    pbtxt = repo / "offline-iaas" / "config.pbtxt"
    model_py.unlink()
    pbtxt.write_text("garbage")
    assert make_dag_cli(ws, "run-damaged", *BBHNET, f'model.repository="{repo}"') == 4
    err = capsys.readouterr().err
    documented("repository-served-file-missing-or-changed", cli_error(err), {repo: "R"},
               exit_code=4)
    assert f"{model_py}: missing from the repository" in err
    assert f"{pbtxt}: changed since the export" in err
    assert not (ws / "run-damaged" / "offline.dag").exists()
    # control: the same repository with both files back passes
    shutil.copy2(ws / "bbhnet-repository" / "offline-iaas" / "1" / "model.py", model_py)
    shutil.copy2(ws / "bbhnet-repository" / "offline-iaas" / "config.pbtxt", pbtxt)
    assert make_dag_cli(ws, "run-restored", *BBHNET, f'model.repository="{repo}"') == 0


def test_make_dag_names_a_streamed_graph_changed_in_place(ws: Path, tmp_path: Path,
                                                          capsys) -> None:
    """A byte of one streamed layer's weights flipped, its mtime kept: onnxruntime loads the
    graph, and run.json pins only the whole-window graph (which the campaign does not serve
    where it streams), so the server would serve other numbers; the manifest's SHA-256 of
    every served file refuses it."""
    import json
    import os
    import shutil

    repo = tmp_path / "streamed-changed"
    shutil.copytree(ws / "bbhnet-repository", repo)
    (directory,) = json.loads((repo / "manifest.json").read_text())["streamed"].values()
    graph = max((repo / directory).glob("*.onnx"), key=lambda p: p.stat().st_size)
    kept, data = graph.stat(), bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x01  # the middle of its largest graph: a weight
    graph.write_bytes(data)
    os.utime(graph, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert make_dag_cli(ws, "run-streamed-changed", *BBHNET, f'model.repository="{repo}"') == 4
    err = capsys.readouterr().err
    assert f"{graph}: changed since the export" in err and "cannot load" not in err
    assert not (ws / "run-streamed-changed" / "offline.dag").exists()
    # control: the byte back, the repository passes
    data[len(data) // 2] ^= 0x01
    graph.write_bytes(data)
    assert make_dag_cli(ws, "run-streamed-restored", *BBHNET, f'model.repository="{repo}"') == 0


def test_export_to_a_file_names_the_file(ws: Path, tmp_path: Path, capsys) -> None:
    """``model.repository`` set to a file (the config itself, a slip): named as a file, where
    the OS's 'Not a directory' named a path under it that no one wrote."""
    target = tmp_path / "not-a-directory"
    target.write_text("kept")
    code = main(["export", str(ws / "campaign.toml"), "--set", f'model.repository="{target}"'])
    err = capsys.readouterr().err
    assert code == 6 and target.read_text() == "kept"
    documented("export-to-a-file", cli_error(err), {tmp_path: "<ws>"}, exit_code=code)
    fresh = tmp_path / "fresh"  # control: a new directory is written
    assert main(["export", str(ws / "campaign.toml"),
                 "--set", f'model.repository="{fresh}"']) == 0
    assert (fresh / "manifest.json").is_file()


@pytest.mark.slow
@pytest.mark.server_exits  # its server refuses the repository on purpose
def test_clients_of_a_server_that_refuses_its_repository_fail_at_once_with_its_reason(
        ws: Path, tmp_path: Path) -> None:
    import shutil

    repo = tmp_path / "model-repository"
    shutil.copytree(ws / "model-repository", repo)
    config = load_config(ws / "campaign.toml", [
        f'model.repository="{repo}"', "workflow.retries=0",
        "client.server_wait_seconds=300"])  # the refusal, not this, must end the wait
    run = RunDir(tmp_path / "run")
    make_dag(config, run)
    (graph,) = repo.rglob("classifier.onnx")
    graph.write_bytes(graph.read_bytes()[:100])  # the repository went bad after planning
    with pytest.raises(RunError, match="client0"):
        run_local(run)
    assert processes_mentioning(str(run.path)) == []
    message = (run.logs / "client0.err").read_text()
    assert "server0 refused to serve this campaign, and no other server is live" in message
    documented("server-refused-repository", cli_error(message), {repo: "R"})
    assert f"{graph}: onnxruntime cannot load the classifier graph" in message
    assert "within 300 s" not in message
    assert "onnxruntime cannot load" in (run.logs / "server0.err").read_text()
