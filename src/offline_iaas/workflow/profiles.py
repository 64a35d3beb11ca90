"""Site profiles: what the submit files of a campaign need on each kind of HTCondor pool.

``[site] profile`` picks one of ``PROFILES``; the rest of ``[site]`` and ``[server]`` fill it in.

==========  ===========  ============================  ==========================  ===========
profile     files        server job                    client / merge jobs         rendezvous
==========  ===========  ============================  ==========================  ===========
local       shared       host (run-local)              host                        file
ldg         shared       host, or MY.SingularityImage  host, or MY.SingularityImage file
osg         transfer     MY.SingularityImage           MY.SingularityImage         job ad
hepcloud    transfer     container universe            container universe          job ad
==========  ===========  ============================  ==========================  ===========

* **files**: ``shared``: every node reads and writes the run directory itself
  (``should_transfer_files = NO``). ``transfer``: HTCondor moves the job specs, the model
  repository tarball and the parts (``transfer_input_files``/``transfer_output_files``).
  ``site.filesystem`` overrides the profile's default.
* **server job**: with ``server.runtime = "native"`` and a ``server.image`` on a cluster profile,
  HTCondor starts the job inside the Triton image (which must hold offline-iaas, see
  ``containers/server.def``); with ``apptainer``/``singularity`` the job runs on the host and
  ``serve`` starts the image itself (``serve/container.py``).
* **rendezvous**: ``file``: the server writes ``servers/<node>.json`` in the shared run
  directory. ``job ad``: the server sets its address in its own job ad (chirp), and each client
  node's PRE script, on the access point, waits for it and writes that same file, which the
  client job then receives as an input file (``rendezvous/prescript.py``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.config_numbers import MAX_SERVER_CORES
from offline_iaas.config_sections import ServerConfig, SiteConfig
from offline_iaas.errors import ConfigError
from offline_iaas.rendezvous.job_ads import NODE_ATTRIBUTE, RUN_ATTRIBUTE
from offline_iaas.rundir import REPOSITORY_TARBALL, RunDir
from offline_iaas.workflow.submit import render_submit

ACCOUNTING_EXAMPLE = "ligo.prod.o3.detchar.nonlin_coup.deepclean"
"""A valid IGWN accounting tag, shown in error messages."""

# <ligo|igwn|virgo|kagra>.<dev|sim|prod>.<run>.<group>.<search>[...]
_ACCOUNTING_TAG = re.compile(
    r"(ligo|igwn|virgo|kagra)\.(dev|sim|prod)\.[a-z]+[0-9]+[a-z]?(\.[a-z0-9_]+){2,}"
)
_ACCOUNTING_USER = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*")


@dataclass(frozen=True)
class Profile:
    """What a kind of pool offers and requires."""

    name: str
    description: str
    filesystem: str
    """Default file handling: ``shared`` or ``transfer``."""
    container: str
    """How HTCondor puts a job in an image: ``singularity`` (``MY.SingularityImage``),
    ``universe`` (container universe, ``container_image``) or ``""`` (never)."""
    accounting_required: bool
    cluster: bool
    """Jobs run on other machines than the access point."""


PROFILES: dict[str, Profile] = {
    "local": Profile("local", "this machine (offline-iaas run-local)", "shared", "", False, False),
    "ldg": Profile("ldg", "LIGO Data Grid cluster", "shared", "singularity", True, True),
    "osg": Profile("osg", "OSPool / IGWN pool, no shared filesystem", "transfer", "singularity",
                   False, True),
    "hepcloud": Profile("hepcloud", "HEPCloud, no shared filesystem", "transfer", "universe",
                        False, True),
}


@dataclass(frozen=True)
class Site:
    """A profile resolved against a campaign."""

    profile: Profile
    transfer: bool
    """HTCondor file transfer instead of a shared filesystem."""
    server_in_image: bool
    """HTCondor starts the server job inside ``server.image``."""
    client_in_image: bool
    """HTCondor starts client and merge jobs inside ``site.client_image``."""
    bind: str = "127.0.0.1"
    """The address servers listen on: ``server.bind``, or the profile's when it is empty."""

    @property
    def rendezvous(self) -> str:
        """``file`` (shared run directory) or ``jobad`` (chirp + PRE script)."""
        return "jobad" if self.transfer else "file"


def accounting_problem(tag: str) -> str | None:
    """Why ``tag`` is not an IGWN accounting tag, or None if it is one."""
    if _ACCOUNTING_TAG.fullmatch(tag):
        return None
    return (
        f"{tag!r} is not an IGWN accounting tag <ligo|igwn|virgo|kagra>.<dev|sim|prod>.<run>."
        f"<group>.<search>[.<pipeline>], e.g. accounting_group = \"{ACCOUNTING_EXAMPLE}\" "
        "(the tags you may use are listed at https://accounting.ligo.org/user)"
    )


def resolve_site(config: CampaignConfig) -> Site:
    """Check ``[site]`` against the campaign and resolve its profile.

    Raises
    ------
    ConfigError
        Naming the key and the config file: an ``ldg`` campaign without an accounting group
        (with a valid example), a malformed accounting tag or user, a loopback ``server.bind``
        on a cluster, or images missing where jobs cannot run without them.
    """
    site, server = config.site, config.server
    profile = PROFILES[site.profile]

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{config.source}: '{key}' {why}")

    if profile.accounting_required and not site.accounting_group:
        raise fail(
            "site.accounting_group",
            f"is required with site.profile = \"{profile.name}\" (LIGO clusters refuse jobs "
            f"without one); add to [site] e.g. accounting_group = \"{ACCOUNTING_EXAMPLE}\" "
            "(your tags: https://accounting.ligo.org/user)",
        )
    if site.accounting_group:
        problem = accounting_problem(site.accounting_group)
        if problem:
            raise fail("site.accounting_group", problem)
    if site.accounting_group_user and not _ACCOUNTING_USER.fullmatch(site.accounting_group_user):
        raise fail(
            "site.accounting_group_user",
            f"{site.accounting_group_user!r} is not a user name (e.g. \"albert.einstein\")",
        )
    for key, image in (("server.image", server.image), ("site.client_image", site.client_image),
                       ("site.image_executable", site.image_executable)):
        if any(c.isspace() or c in "\"'$" for c in image):
            raise fail(key, f"{image!r} cannot hold white space, quotes or '$' in a submit file")
    transfer = (site.filesystem or profile.filesystem) == "transfer"
    # an IPv4 address (config_section_rules.bind_problem): 127.0.0.0/8 is this machine only
    if profile.cluster and server.bind and ipaddress.IPv4Address(server.bind).is_loopback:
        raise fail(
            "server.bind",
            f"is {server.bind!r}, which clients on other machines cannot reach; set "
            "bind = \"0.0.0.0\" in [server] for a cluster (or leave it out: the profile's)",
        )
    if profile.cluster and profile.filesystem == "transfer":
        # Nothing of this environment exists on the workers: every job needs its image.
        if server.runtime != "native":
            raise fail(
                "server.runtime",
                f"must be \"native\" with site.profile = \"{profile.name}\": HTCondor starts the "
                "server job inside server.image, where tritonserver is on PATH",
            )
        if not server.image:
            raise fail("server.image", f"is required with site.profile = \"{profile.name}\"")
        if not site.client_image:
            raise fail(
                "site.client_image",
                f"is required with site.profile = \"{profile.name}\" (the image of the client "
                "and merge jobs, built from containers/client.def)",
            )
    container = bool(profile.container)
    return Site(
        profile=profile,
        transfer=transfer,
        server_in_image=container and server.runtime == "native" and bool(server.image),
        client_in_image=container and bool(site.client_image),
        bind=server.bind or ("0.0.0.0" if profile.cluster else "127.0.0.1"),
    )


# ---- submit files -------------------------------------------------------------------------
def _block(title: str, commands: list[tuple[str, str]]) -> list[str]:
    if not commands:
        return []
    width = max(len(key) for key, _ in commands)
    return [f"# {title}", *(f"{key.ljust(width)} = {value}" for key, value in commands), ""]


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '\\"') + '"'


def _requests(server: ServerConfig, site: SiteConfig, role: str) -> list[tuple[str, str]]:
    if role == "server":
        # one core per instance and one for the server, within one machine's threads as
        # ``server.cpus`` is (4,096 instances ask for 4,096 cores, not 4,097)
        cpus = server.cpus or min(server.instances + 1, MAX_SERVER_CORES)
        out = [
            ("request_cpus", str(cpus)),
            ("request_memory", server.memory),
            ("request_disk", server.disk),
        ]
        if server.gpus:
            out.append(("request_gpus", str(server.gpus)))
            if server.gpu_capability:
                out.append(("gpus_minimum_capability", str(server.gpu_capability)))
            if server.gpu_memory_mb:
                out.append(("gpus_minimum_memory", str(server.gpu_memory_mb)))
        return out
    if role == "client":
        return [("request_cpus", "1"), ("request_memory", site.client_memory),
                ("request_disk", site.client_disk)]
    if role in ("shard", "merge"):
        return [("request_cpus", "1"), ("request_memory", site.merge_memory),
                ("request_disk", site.merge_disk)]
    return []


def _transfer(site: Site, role: str) -> list[tuple[str, str]]:
    if role == "final" or role == "index":
        return []
    if not site.transfer:
        return [("should_transfer_files", "NO")]
    run = RunDir("")  # paths relative to the run directory, where the jobs start
    inputs = ", ".join(str(p) for p in {
        "server": [run.config, run.run_info, run.token, run.repository_tarball],
        # every published address, so that a client can fail over to another server
        "client": [run.config, run.run_info, run.token, run.job("$(node)"), run.servers],
        "merge": [run.config, run.run_info, run.jobs, run.parts],
        # the parts of the clients it reads ($(parts), set by the DAG's VARS line)
        "shard": [run.config, run.run_info, run.jobs, "$(parts)"],
    }[role])
    out = [("should_transfer_files", "YES"), ("transfer_input_files", inputs),
           ("preserve_relative_paths", "true")]
    if role == "server":
        # Removed at the end of the DAG: nothing comes back, so its log is streamed.
        out += [("stream_output", "true"), ("stream_error", "true")]
    else:
        outputs = ", ".join(str(p) for p in {
            "client": run.part("$(node)"), "merge": [run.output[0].parent],
            "shard": [*run.shard_output("$(node)"), run.shard_frames("$(node)")]}[role])
        # Only a successful job has outputs; ON_EXIT would hold a failed one for missing files.
        out += [("transfer_output_files", outputs), ("when_to_transfer_output", "ON_SUCCESS"),
                ("success_exit_code", "0")]
    return out


def _container(server_image: str, client_image: str, site: Site, role: str
               ) -> list[tuple[str, str]]:
    if role == "server" and site.server_in_image:
        image = server_image
    elif role in ("client", "shard", "merge") and site.client_in_image:
        image = client_image
    else:
        return ([("transfer_executable", "false")]
                if site.transfer and role not in ("final", "index") else [])
    if site.profile.container == "universe":
        return [("container_image", image), ("transfer_executable", "false")]
    return [("MY.SingularityImage", _quoted(image)), ("transfer_executable", "false")]


def _credentials(datafind_server: str, oauth_permissions: str, site: Site, role: str
                 ) -> list[tuple[str, str]]:
    url = datafind_server
    if role != "client" or not url or site.profile.name == "local":
        return []
    if "://" not in url:
        url = f"https://{url}"
    return [
        ("use_oauth_services", "igwn"),
        ("igwn_oauth_resource", url),
        ("igwn_oauth_permissions", oauth_permissions),
    ]


def _arguments(role: str, site: Site) -> str:
    """A role's arguments; ``.`` is the run directory, where every job starts (no
    ``initialdir``: the directory DAGMan submits from) or, with file transfer, its sandbox."""
    if role == "server":
        extra = f" --repository {REPOSITORY_TARBALL} --rendezvous jobad" if site.transfer else ""
        return f"serve --run-dir . --node $(node){extra}"
    if role == "client":
        return "client --run-dir . --node $(node)"
    if role == "shard":
        return "merge-shard --run-dir . --node $(node)"
    return "merge --run-dir ."


def submit_texts(
    config: CampaignConfig,
    site: Site,
    host_executable: Path,
    run_id: str,
    sharded: bool = False,
) -> dict[str, str]:
    """Every submit file of a campaign, role to text.

    Parameters
    ----------
    config, site
        The campaign and its resolved site profile.
    host_executable
        The offline-iaas console script on the access point (and on the workers, when they
        share its filesystem or software area).
    run_id
        The run directory's identifier, put in every job ad (``MY.OfflineIaasRun``).
    sharded
        The DAG has shard merges (``merge.shard_seconds``): adds ``shard.sub``. With file
        transfer the merge node, then an index of the shards, runs on the access point
        (``universe = local``), where the shards' outputs came back.
    """
    texts = {}
    for name in ("server", "client", *(["shard"] if sharded else []), "merge", "final"):
        # the index of the shards reads them where they are: no transfer
        role = "index" if name == "merge" and sharded and site.transfer else name
        in_image = site.server_in_image if role == "server" else site.client_in_image
        in_image = in_image and role not in ("final", "index")
        universe = "container" if in_image and site.profile.container == "universe" else "vanilla"
        universe = "local" if role == "index" else universe
        executable = config.site.image_executable if in_image else str(host_executable)
        node = "$(node)" if role in ("server", "client", "shard") else name
        lines: list[str] = []
        lines += _block(f"Resources ({site.profile.name} profile).",
                        _requests(config.server, config.site,
                                  "merge" if role == "index" else role))
        accounting = []
        if config.site.accounting_group:
            accounting.append(("accounting_group", config.site.accounting_group))
        if config.site.accounting_group_user:
            accounting.append(("accounting_group_user", config.site.accounting_group_user))
        lines += _block("Accounting (LIGO clusters refuse jobs without a group).", accounting)
        lines += _block("Container image (the job starts inside it).",
                        _container(config.server.image, config.site.client_image, site, role))
        lines += _block("Data credentials: a SciToken for the datafind server.",
                        _credentials(config.data.datafind_server,
                                     config.site.oauth_permissions, site, role))
        files = "HTCondor file transfer" if site.transfer else "shared filesystem"
        lines += _block(f"Files: {files}.", _transfer(site, role))
        ident = [(f"MY.{RUN_ATTRIBUTE}", _quoted(run_id)), (f"MY.{NODE_ATTRIBUTE}", _quoted(node))]
        if role == "server" and site.rendezvous == "jobad":
            ident.insert(0, ("want_io_proxy", "true"))
            title = "Identity; the server sets its address in its job ad (condor_chirp)."
        else:
            title = "Identity (condor_q -constraint 'OfflineIaasRun == \"...\"')."
        lines += _block(title, ident)
        values = {
            "UNIVERSE": universe,
            "EXECUTABLE": executable if role != "final" else str(host_executable),
            "ARGUMENTS": _arguments(role, site) if role != "final" else "",
            "SERVER_RETRIES": str(config.workflow.retries),
            "SITE": "\n".join(lines),
        }
        texts[name] = render_submit(name, values)
    return texts
