"""The submit files a pool receives for the demo campaign at each cluster profile.

``submit/rendered/<profile>/<role>.sub`` holds, for the packaged demo campaign
(``workflow/demo.toml``) with the site settings below, exactly what ``make-dag`` writes into any
run directory (they name no path inside it), so that a site admin reads what a pool receives without
running anything. Regenerate them with::

    make submit-examples        # python -m offline_iaas.workflow.examples submit/rendered

``tests/test_packaging.py`` renders them again and checks the committed files are equal.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from offline_iaas.config import load_config
from offline_iaas.workflow.profiles import ACCOUNTING_EXAMPLE, resolve_site, submit_texts

EXAMPLE_EXECUTABLE = Path("/cvmfs/software.igwn.org/conda/envs/offline-iaas/bin/offline-iaas")
EXAMPLE_RUN_ID = "0123456789abcdef"
_SERVER_IMAGE = "/cvmfs/singularity.opensciencegrid.org/igwn/offline-iaas-server:0.1"
_CLIENT_IMAGE = "/cvmfs/singularity.opensciencegrid.org/igwn/offline-iaas-client:0.1"
_GPU_SERVER = ["server.gpus=1", 'server.memory="16GB"', 'server.disk="8GB"',
               f'server.image="{_SERVER_IMAGE}"']

SITE_OVERRIDES: dict[str, list[str]] = {
    "ldg": ['site.profile="ldg"', f'site.accounting_group="{ACCOUNTING_EXAMPLE}"',
            'site.accounting_group_user="albert.einstein"', 'server.runtime="apptainer"',
            *_GPU_SERVER],
    "osg": ['site.profile="osg"', f'site.client_image="{_CLIENT_IMAGE}"', *_GPU_SERVER],
    "hepcloud": ['site.profile="hepcloud"',
                 'site.client_image="docker://ghcr.io/igwn/offline-iaas:0.1"',
                 "server.gpus=1", 'server.image="docker://ghcr.io/igwn/offline-iaas-server:0.1"'],
}
"""``--set`` overrides of the demo campaign for each profile (what a user adds to ``[site]``
and ``[server]``)."""


def render_examples(out_dir: Path) -> list[Path]:
    """Write ``<out_dir>/<profile>/<role>.sub`` for every profile of ``SITE_OVERRIDES``;
    return the files written."""
    demo = Path(str(resources.files("offline_iaas.campaigns").joinpath("demo.toml")))
    written = []
    for profile, overrides in SITE_OVERRIDES.items():
        config = load_config(demo, overrides)
        site = resolve_site(config)
        sharded = config.merge.shard_seconds > 0
        texts = submit_texts(config, site, EXAMPLE_EXECUTABLE, EXAMPLE_RUN_ID,
                             sharded=sharded)
        directory = out_dir / profile
        directory.mkdir(parents=True, exist_ok=True)
        for role, text in texts.items():
            path = directory / f"{role}.sub"
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="e.g. submit/rendered")
    args = parser.parse_args(argv)
    for path in render_examples(args.out_dir):
        print(path)


if __name__ == "__main__":
    main()
