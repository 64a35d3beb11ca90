"""The repository's top level as the design names it: ``workflow/`` (campaign configs) and
``submit/`` (submit templates, and the files each site profile receives for the demo) ship in
the wheel as ``offline_iaas.campaigns`` and ``offline_iaas.submit_files``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from offline_iaas.workflow.examples import SITE_OVERRIDES, render_examples
from offline_iaas.workflow.submit import ROLES

ROOT = Path(__file__).resolve().parents[1]
RENDERED = ROOT / "submit" / "rendered"


def differing_files(expected: Path, found: Path) -> list[str]:
    """Files missing from either tree, or whose text differs."""
    names = {p.relative_to(expected) for p in expected.rglob("*.sub")}
    others = {p.relative_to(found) for p in found.rglob("*.sub")}
    return sorted(str(n) for n in names ^ others) + sorted(
        str(n) for n in names & others if (expected / n).read_text() != (found / n).read_text())


def test_the_rendered_submit_files_are_what_make_dag_writes_for_each_site(tmp_path: Path) -> None:
    render_examples(tmp_path)
    assert differing_files(RENDERED, tmp_path) == [], (
        "submit/rendered is out of date: run make submit-examples and review the diff")
    assert sorted(p.name for p in RENDERED.iterdir()) == sorted(SITE_OVERRIDES)
    assert {"ldg", "osg", "hepcloud"} <= set(SITE_OVERRIDES)
    for profile in SITE_OVERRIDES:
        assert {p.stem for p in (RENDERED / profile).glob("*.sub")} == set(ROLES)


def test_the_comparison_sees_a_changed_or_missing_file(tmp_path: Path) -> None:  # control
    shutil.copytree(RENDERED, tmp_path / "copy")
    client = tmp_path / "copy" / "ldg" / "client.sub"
    client.write_text(client.read_text().replace("request_memory", "request_memery"))
    (tmp_path / "copy" / "osg" / "final.sub").unlink()
    assert differing_files(RENDERED, tmp_path / "copy") == ["osg/final.sub", "ldg/client.sub"]


def test_pyproject_lists_every_package_folder() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    src = ROOT / "src"
    folders = {".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py")}
    folders.add("offline_iaas.repository.backend")  # the python backend's model files
    mapped = {"offline_iaas.campaigns": "workflow", "offline_iaas.submit_files": "submit"}
    assert set(setuptools["packages"]) == folders | set(mapped)
    assert {k: v for k, v in setuptools["package-dir"].items() if k} == mapped


def test_a_wheel_carries_the_campaigns_and_the_submit_templates(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("offline_iaas-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for config in ("demo.toml", "o3-month-deepclean.toml", "README.md"):
        assert f"offline_iaas/campaigns/{config}" in names
    for role in ROLES:
        assert f"offline_iaas/submit_files/{role}.sub" in names
    assert "offline_iaas/repository/backend/fused.py" in names
    assert "offline_iaas/science/deepclean/backend/streamed_deepclean.py" in names  # a runner
    assert not any(n.startswith("offline_iaas/submit_files/rendered") for n in names)
    # installed on its own (no site-packages, so not this checkout's editable install)
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    probe = ("from importlib import resources; import offline_iaas; "
             "print(offline_iaas.__file__); "
             "print(resources.files('offline_iaas.campaigns').joinpath('demo.toml').is_file(), "
             "resources.files('offline_iaas.submit_files').joinpath('server.sub').is_file())")
    found = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                           env={"PYTHONPATH": str(target)}, cwd=tmp_path, check=True)
    where, flags = found.stdout.splitlines()
    assert where.startswith(str(target)) and flags == "True True"


def test_every_campaign_config_loads_and_suits_its_site_profile() -> None:
    from offline_iaas.config import load_config
    from offline_iaas.workflow.profiles import resolve_site

    configs = sorted((ROOT / "workflow").glob("*.toml"))
    assert {p.stem for p in configs} >= {"demo", "o3-month-deepclean", "bbhnet-search",
                                         "o3-week-bbhnet-osg"}
    readme = (ROOT / "workflow" / "README.md").read_text()
    for path in configs:
        resolve_site(load_config(path))
        assert f"`{path.name}`" in readme, f"workflow/README.md does not describe {path.name}"
