"""``report`` of a run whose campaign.toml or run.json is damaged, or whose campaign.toml was
edited since make-dag: the page is written (a damaged file named on it, an edit in a line at
its top), and the command exits as ``status`` does, with the same line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.records import read_run_info
from offline_iaas.report.page import escape
from offline_iaas.rundir import RunDir, restore_advice, restore_command
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status
from tests.bad_input_cases import fake_parts
from tests.error_catalogue import cli_error, documented


def finished_run(small_campaign_dir, tmp_path: Path) -> Path:
    """make-dag of the small campaign, its parts faked as finished (no server)."""
    ws = small_campaign_dir()
    run = tmp_path / "run"
    make_dag(load_config(ws / "campaign.toml"), RunDir(run))
    fake_parts(run)
    return run


@pytest.fixture
def run_dir(small_campaign_dir, tmp_path: Path) -> Path:
    return finished_run(small_campaign_dir, tmp_path)


def report(run: Path, capsys) -> tuple[int, str, str]:
    """The report's exit code, its error line, and the page it wrote."""
    code = main(["report", str(run)])
    err = capsys.readouterr().err
    return code, (cli_error(err) if code else ""), (run / "report" / "index.html").read_text()


def status_line(run: Path, capsys) -> tuple[int, str]:
    code = main(["status", str(run)])
    return code, cli_error(capsys.readouterr().err)


@pytest.mark.parametrize("damage", ["invalid", "absent"])
def test_report_names_a_damaged_campaign_toml_and_exits_as_status_does(
        run_dir: Path, capsys, damage: str) -> None:
    config = run_dir / "campaign.toml"
    if damage == "invalid":
        config.write_text("x =\n")
    else:
        config.unlink()
    code, line, text = report(run_dir, capsys)
    assert (code, line) == status_line(run_dir, capsys)
    assert code == 2 and str(config) in line
    assert ("not valid TOML" if damage == "invalid" else "config file not found") in line
    assert "no campaign.toml to check" not in text
    assert f"not checked against the campaign: {line}" in text
    row = "report-campaign-toml-invalid" if damage == "invalid" else "report-campaign-toml-absent"
    documented(row, line, {run_dir: "<ws>/run"}, exit_code=2)


def test_report_gives_status_and_merges_remedy_for_a_damaged_run_json(
        run_dir: Path, capsys) -> None:
    (run_dir / "run.json").write_text("")
    code, line, text = report(run_dir, capsys)
    assert (code, line) == status_line(run_dir, capsys)
    assert code == 2 and restore_advice(RunDir(run_dir)) in line
    assert "delete it and run again" not in text
    assert restore_command(RunDir(run_dir)) in text
    documented("report-damaged-run-record", line, {run_dir: "<ws>/run"}, exit_code=2)


def test_report_of_an_intact_run_exits_zero(run_dir: Path, capsys) -> None:
    assert report(run_dir, capsys)[0] == 0


def test_the_report_page_names_a_missing_run_json_atop_it_as_status_does(
        run_dir: Path, capsys) -> None:
    """The page did not name a missing run.json (its reader takes absent for not yet
    written): status's line is now atop it, as an edited campaign.toml's is."""
    code, _, text = report(run_dir, capsys)  # control: no refusal, none on the page
    assert code == 0 and "run.json is missing" not in text
    (run_dir / "run.json").unlink()
    code, line, text = report(run_dir, capsys)
    assert (code, line) == status_line(run_dir, capsys)
    assert code == 2 and "run.json is missing" in line, line
    shown = f'<p class="problem">{escape(line)}</p>'
    assert text.count(shown) == 1 and text.index(shown) < text.index("<nav>"), text[:2000]


def test_report_of_a_run_whose_campaign_toml_was_edited_says_so_atop_its_page_and_exits_as_status(
        run_dir: Path, capsys) -> None:
    """The page said nothing of the edit before: one line at its top, status's, names it."""
    config = run_dir / "campaign.toml"
    planned = config.read_text()
    # control: the run as make-dag planned it reports with no error, and no edit on its page
    code, line, text = report(run_dir, capsys)
    assert (code, line) == (0, "")
    assert "was edited since make-dag" not in text
    edited = re.sub(r"^duration = .*$", "duration = 32", planned, flags=re.M)
    assert edited != planned  # a setting the parts depend on (the stream hash)
    config.write_text(edited)
    page = run_dir / "report" / "index.html"
    page.unlink()
    code = main(["report", str(run_dir)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("offline-iaas report: error: "), err
    line = cli_error(err)
    assert line.startswith(f"{config} was edited since make-dag planned this run"), line
    assert (code, line) == status_line(run_dir, capsys)
    assert page.is_file()  # written first, whatever state the run is in
    text = page.read_text()
    shown = f'<p class="problem">{escape(line)}</p>'
    assert text.count(shown) == 1, text[:2000]
    assert text.index(shown) < text.index("<nav>")  # atop the page, above every section
    ours = load_config(config).stream_hash()
    planned_hash = read_run_info(RunDir(run_dir)).stream_hash
    assert ours != planned_hash
    documented("report-run-config-edited", line, {
        run_dir: "<ws>/run", ours: "<hash of the edited config>",
        planned_hash: "<hash of the run>"}, exit_code=code)
    config.write_text(planned)  # undone: the report exits 0 again, its page says no edit
    code, line, text = report(run_dir, capsys)
    assert (code, line) == (0, "")
    assert "was edited since make-dag" not in text


@pytest.mark.parametrize("damage", ["a time that is none", "not JSON"])
def test_report_names_a_damaged_local_state_and_exits_as_status_does(
        run_dir: Path, capsys, damage: str) -> None:
    """run-local's local-state.json damaged: the page is written, naming it where it was not
    drawn, and report exits as status does (exit 0 before, its errors.md row said 6)."""
    assert report(run_dir, capsys)[:2] == (0, "")  # control: no local state yet
    state = run_dir / "local-state.json"
    state.write_text('{"version": 1, "updated": "yesterday", "nodes": {}}'
                     if damage == "a time that is none" else "{")
    code, line, text = report(run_dir, capsys)
    assert (code, line) == status_line(run_dir, capsys)
    assert code == 6 and line.startswith(f"{state}"), line
    assert str(state) in text


def test_report_names_a_damaged_repository_manifest_not_a_missing_one(
        run_dir: Path, capsys) -> None:
    repository = load_config(run_dir / "campaign.toml").model.repository
    _, _, page = report(run_dir, capsys)
    assert "No model repository manifest found." not in page  # control: the manifest's table
    (repository / "manifest.json").write_text("{")
    _, _, page = report(run_dir, capsys)
    assert "The model repository&#x27;s manifest: " in page
    assert escape(f"{repository / 'manifest.json'}") in page and "export the repository" in page
    assert "No model repository manifest found." not in page


def _list_a_client_without_a_spec(run: Path) -> None:
    """run.json lists a client make-dag never planned: no job spec, no node in the DAG."""
    info = json.loads((run / "run.json").read_text())
    info["clients"].append("client9")
    (run / "run.json").write_text(json.dumps(info))


def _edit_a_job_spec(run: Path) -> None:
    spec = run / "jobs" / "client0.json"
    spec.write_text(spec.read_text().replace('"server0"', '"server0" ', 1))


@pytest.mark.parametrize(("damage", "row"), [
    (_list_a_client_without_a_spec, "report-run-json-client-without-a-node"),
    (_edit_a_job_spec, "report-job-spec-changed")])
def test_report_refuses_the_runs_status_refuses_with_status_line_after_writing_its_page(
        run_dir: Path, capsys, damage, row: str) -> None:
    """Before, report wrote its page and exited 0 where status refused the run (exit 6): it
    checked campaign.toml and run.json only, not the DAG's nodes or the job specs; now both
    commands make the one check (``workflow.status.checked_inputs``)."""
    assert status_line(run_dir, capsys) == (0, "")  # control: the intact run passes both
    assert report(run_dir, capsys)[:2] == (0, "")
    damage(run_dir)
    page = run_dir / "report" / "index.html"
    page.unlink()
    code, line, _ = report(run_dir, capsys)
    assert (code, line) == status_line(run_dir, capsys)
    assert code == 6 and page.is_file(), line  # the page is written first
    documented(row, line, {run_dir: "<ws>/run"}, exit_code=code)


def test_a_deleted_job_spec_is_named_by_status_and_refused_by_neither_command(
        run_dir: Path, capsys) -> None:
    """A client's spec deleted (its part complete): status names it on the client's line and
    exits 0, and so does report (its node is what cannot run again, not the run)."""
    (run_dir / "jobs" / "client0.json").unlink()
    assert report(run_dir, capsys)[:2] == (0, "")
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"{run_dir / 'jobs' / 'client0.json'}: no job spec for node client0" in out


def test_the_report_page_names_a_deleted_job_spec_where_status_names_it(
        run_dir: Path, capsys) -> None:
    """A client's spec deleted (its part complete): status names it on the client's line; the
    page said nothing of it (its coverage map left the client out in silence). Now the page
    names it in status's words (``binding.client_job_or_problem``), once. The control: the run
    as make-dag planned it, no such line."""
    code, _, text = report(run_dir, capsys)
    assert code == 0 and "job spec(s) missing or damaged" not in text
    assert "no job spec for node" not in text
    spec = run_dir / "jobs" / "client0.json"
    spec.unlink()
    client0 = next(n for n in read_status(RunDir(run_dir)).nodes if n.name == "client0")
    assert client0.detail.startswith(f"{spec}: no job spec for node client0"), client0.detail
    code, _, text = report(run_dir, capsys)
    assert code == 0
    assert "1 client job spec(s) missing or damaged" in text
    assert text.count(f"<td>client0</td><td>{escape(client0.detail)}</td>") == 1, text[:3000]

