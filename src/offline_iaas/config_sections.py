"""The sections of the campaign configuration, one dataclass each: every field is a key of
that section of the TOML file (``config.py`` reads, checks and combines them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


def ifo_of(channel: str) -> str:
    """The interferometer prefix of a channel (``H1`` of ``H1:GDS-CALIB_STRAIN``)."""
    return channel.split(":", 1)[0]


@dataclass(frozen=True)
class DataConfig:
    """Where the frames are and what to read from them."""

    channels: tuple[str, ...]
    """Strain channels, one per interferometer (``H1:...``, ``L1:...``), in model input order."""
    start: float
    """GPS start of the analysis span, on the ``sample_rate`` grid (a whole number of samples
    after a whole GPS second, where frame files start)."""
    duration: float
    """Length of the analysis span in seconds (a whole number of samples; like every length of
    time of the config, at most 10**9 s: ``config_numbers.MAX_SECONDS``)."""
    sample_rate: float
    """Model sample rate in Hz; every channel is resampled to it."""
    frames: Path | None = None
    """A directory of ``.gwf`` files, or a LAL/FFL cache file listing them."""
    datafind_server: str = ""
    """A gwdatafind server to discover frames from (instead of ``frames``): its URL,
    ``http(s)://HOST[:PORT][/PATH]``, or ``HOST[:PORT]``, asked over https as gwdatafind asks
    (``config_section_rules.datafind_problem``)."""
    frametypes: tuple[str, ...] = ()
    """Frame types to read (``H1_HOFT_C01``, and ``H1_R`` where the witnesses are in the raw
    frames): those the datafind server is asked for, or, with ``frames``, those chosen among
    its files (by the description in their names; default all). An observatory's channels may
    be in several types; one channel in two types over one time is refused."""
    segments: Path | None = None
    """Optional science-segment file (``start end`` per line, or LIGO_LW XML)."""
    witnesses: tuple[str, ...] = ()
    """Witness channels of DeepClean (modes ``deepclean`` and ``e2e``), each ``IFO:NAME``; the
    DeepClean of an interferometer takes that interferometer's witnesses in this order."""
    on_bad_file: str = "fail"
    """A frame file the frame library cannot read (truncated, corrupt, or lying about its
    span): ``fail`` stops the node that meets it with the file named (exit code 3); ``gap``
    makes the file's span a gap, as if the file were missing: streams end before it and
    start again after it, the rest is processed, and the output's provenance lists it. Not
    in the config hash: a part finished under one choice is valid under the other."""


@dataclass(frozen=True)
class SynthConfig:
    """Parameters of ``offline-iaas synth`` (the synthetic dataset)."""

    description: str = "SYNTH"
    """The frame files' description: ``<O>-<IFO>_<description>-<GPS>-<seconds>.gwf``."""
    file_duration: float = 64.0
    """Seconds of data per GWF file written."""
    frame_sample_rate: float = 2048.0
    """Sample rate (Hz) of the strain channels written."""
    witness_sample_rate: float = 0.0
    """Sample rate (Hz) of the witness channels; 0 means ``frame_sample_rate``."""
    witnesses: int = 2
    """Witness channels per interferometer (``<IFO>:PEM-SYNTH_WITNESS_<i>``); the first two
    couple the line into the strain, the others are uncoupled noise (``data/synth.py``)."""
    witness_coupling: float = 0.5
    """``kappa``: the coupled line's amplitude is ``kappa * s``, ``s`` set by the noise's ASD
    at the line (``data/synth.py``)."""
    line_frequency: float = 60.0
    """Frequency (Hz) of the witness-coupled line."""
    injections: int = 4
    """Binaries drawn from the population below and injected, spread evenly over the span
    (``data/synth.py``); ignored with ``injection_file``."""
    seed: int = 1234
    """Seed of every random stream (one per channel): the dataset is the same bits each time."""
    noise_drift: float = 1.0
    """The detector noise's amplitude at the end of the span over that at its start, growing
    linearly in time (1: stationary); signals and witnesses are not scaled."""
    approximant: str = "IMRPhenomD"
    """lalsimulation approximant of the injections (any name lalsimulation generates in the
    time or frequency domain: ``IMRPhenomD``, ``IMRPhenomXPHM``, ``SEOBNRv4_ROM``, ...)."""
    f_lower_hz: float = 20.0
    """The waveforms start at this frequency (also their reference frequency), and the
    recorded SNRs integrate from it."""
    mass_min_msun: float = 20.0
    """The least source-frame component mass (the population: ``mass_max_msun``'s text)."""
    mass_max_msun: float = 50.0
    """Source-frame component masses are uniform in ``[mass_min_msun, mass_max_msun]`` (heavy
    binaries: most of their SNR lies in BBHnet's last second, and from 20 Hz they last at
    most ~5 s)."""
    spin_max: float = 0.5
    """Aligned spins uniform in ``[-spin_max, spin_max]``."""
    redshift_max: float = 3.0
    """Redshifts uniform in comoving volume and source-frame time up to this (Planck18).
    Beyond the horizon of the default population in the demo's network: its loudest binary
    (50 + 50 Msun, aligned spins 0.5, face-on, overhead two aLIGO design detectors) reaches
    network SNR 8 at z = 2.79 (``population.horizon_redshift``, IMRPhenomD from 20 Hz at
    1024 Hz; 1.95 for one detector), so no findable binary lies beyond z_max and VT is the
    search's, not the drawn volume's (``tests/test_population.py``). At 0.4, injections at
    z = 0.38 were still found at SNR 13-24."""
    network_snr_min: float = 4.0
    """Binaries drawn below this optimal network SNR are not injected but count as missed:
    ``synth`` draws until ``injections`` pass and records how many it drew (``drawn``), and
    VT divides by the draws (``sensitivity.py``). Far beyond the horizon most draws are
    hopeless (at z_max 3 about 70 % of the default population is below 4). 4 is well below
    what a search finds: the demo's quietest found injection had SNR 6.3, and the merge warns
    when one is found below 1.25 x the cut (``sensitivity.cut_bound``); 0 injects all."""
    injection_file: Path | None = None
    """An injection set to inject instead of drawing the population: HDF5 (``.h5``,
    ``.hdf5``: ``search/injection_file.py``) or LIGO_LW ``sim_inspiral`` (``.xml``,
    ``.xml.gz``); rows outside the span are left out."""


@dataclass(frozen=True)
class ModelConfig:
    """The exported model (the fused model by default; ``export --ensemble``: an ensemble of
    one model per stage) and how clients feed it."""

    repository: Path
    """Triton model repository written by ``offline-iaas export``."""
    mode: str = "classifier"
    """What the campaign runs: ``classifier`` (a small seeded CNN, for plumbing and
    benchmarks), ``deepclean`` (noise regression per interferometer), ``bbhnet`` (the BBH
    search on the strain) or ``e2e`` (BBHnet on DeepClean-cleaned strain, one model); or
    the name of a mode package installed beside offline-iaas (``mode_packages.py``, the user
    guide's "Write your own mode")."""
    name: str = "offline-iaas"
    """Name of the model that clients call (the fused model, or the ensemble of
    ``export --ensemble``): its directory in the repository, so letters, digits, '_', '-' and
    '.', not starting with '.' or '-' (``config_section_rules.MODEL_NAME``)."""
    kernel_seconds: float = 1.0
    """Length of one input window."""
    inference_rate: float = 4.0
    """Windows per second of data (Hz); the stride is ``1 / inference_rate``."""
    batch_size: int = 32
    """Windows per request; a request carries ``batch_size * stride`` new samples per channel."""
    input_scale: float = 1e21
    """Factor baked into the network's input (strain is ~1e-21); positive (0 would make every
    input zero, a negative one turn the strain over)."""
    seed: int = 0
    """Seed for the network's initial weights when no weight file is given."""
    streamed: bool | Literal["auto"] = "auto"
    """Networks streamed layer by layer: true, false or ``auto`` (``network_streaming.py``)."""


@dataclass(frozen=True)
class SearchConfig:
    """The search on a mode's statistic (the modes with triggers: bbhnet, e2e): its time
    slides (formed on the server), its injections (added on the fly by the clients, and
    listed for found/missed), the strain's whitening, and the merge's clustering and
    thresholds. ``[bbhnet]`` before #43 (still read, with a deprecation warning)."""

    cluster_seconds: float = 1.0
    """A trigger is a statistic value that is the largest within +-cluster_seconds / 2."""
    injections: Path | None = None
    """The search's injections: ``synth.json`` of ``offline-iaas synth``, a JSON list of
    ``{"gps_time": ..., "network_snr": ...}``, or an injection set (HDF5, ``.h5``/``.hdf5``:
    this project's ``injections.h5`` or aframe's; LIGO_LW ``sim_inspiral``,
    ``.xml``/``.xml.gz``: ``search/injection_file.py``). The merge lists them as found or
    missed; with ``inject`` the clients add the set (an injection set, not JSON) to the strain
    they read, on the fly, as a foreground stream."""
    found_seconds: float = 1.0
    """An injection is found by a trigger within this many seconds of its time ..."""
    exclusion_seconds: float = 4.0
    """... whose statistic beats every trigger farther than this from all injections (at least
    ``found_seconds``: a trigger that finds an injection is never background)."""
    slides: int = 0
    """Background time slides formed on the server from the one stream (0: none). With ``N``,
    BBHnet also runs on every window with the second detector's strain taken ``Δ, 2Δ, ... NΔ``
    earlier (``slide_seconds``) where both windows lie inside the stretch (slide ``k`` from
    ``kΔ`` after the zero lag's first window, which slides do not move); the merge turns
    those background statistics into a false-alarm rate for each trigger."""
    slide_seconds: float = 1.0
    """``Δ``, the step between time slides: a whole number of strides, at least
    ``model.kernel_seconds`` (shorter, neighbouring slides share overlapping windows)."""
    ifar_threshold_years: float = 1.0
    """With time slides, an injection is found by a trigger within ``found_seconds`` whose
    inverse false-alarm rate is at least this."""
    inject: bool = False
    """Add ``injections`` to the strain read, as a foreground stream beside the clean one."""
    whitening: str = "fixed"
    """``fixed``: the FIR baked into BBHnet's graph (from its training background's PSD)
    whitens every window. ``rolling``: the served model whitens each window with a PSD
    estimated from the ``psd_seconds`` of the same stream before it, and the graph's FIR is
    replaced by the identity (BBHnet weights as a state_dict)."""
    psd_seconds: float = 16.0
    """Rolling whitening: data before each window its PSD is estimated from."""
    psd_fftlength: float = 2.0
    """Rolling whitening: Welch's Hann-windowed segments (s), half overlapping, averaged."""
    whitening_crop_seconds: float = 0.25
    """Rolling whitening drops this much from the whitened window, half from each end (where
    the Tukey taper and the FFT's wrap-around are): BBHnet sees ``K`` less this, as after a
    fixed FIR of this length."""


@dataclass(frozen=True)
class LayoutConfig:
    """How the campaign is split: ``servers * clients_per_server`` client shares."""

    servers: int = 1
    """Server nodes, each running one tritonserver."""
    clients_per_server: int = 1
    """Client shares per server: the analysed span is split into ``servers *
    clients_per_server`` of them."""
    rebalance: bool = True
    """A client that has not streamed yet starts on the least loaded live server instead of
    its own (``client/balance.py``; needs a shared filesystem)."""


@dataclass(frozen=True)
class ServerConfig:
    """The inference server nodes."""

    runtime: str = "native"
    """``native``: the tritonserver on PATH, else the one in the nvidia-pytriton wheel;
    ``apptainer`` or ``singularity``: tritonserver from ``server.image`` in a container."""
    image: str = ""
    """Triton container image (SIF file, sandbox directory, CVMFS path or ``docker://`` URI)."""
    gpus: int = 0
    """GPUs per server (``request_gpus``); 0 runs Triton on CPU; at most 128
    (``config_numbers.COUNT_BOUNDS``, as the counts below)."""
    gpu_capability: float = 0.0
    """Minimum CUDA compute capability (``gpus_minimum_capability``); 0 means any."""
    gpu_memory_mb: int = 0
    """Minimum GPU memory in MB (``gpus_minimum_memory``); 0 means any; at most 2**20 (1 TiB)."""
    cpus: int = 0
    """CPU cores per server (``request_cpus``); 0 means ``instances + 1`` (at most 4096);
    at most 4096."""
    memory: str = "4GB"
    """Memory per server (``request_memory``), with its unit: ``8GB``, ``512MB``; like every
    job's memory and disk, at least ``1MB``."""
    disk: str = "4GB"
    """Scratch disk per server (``request_disk``), with its unit."""
    instances: int = 1
    """Instances of the served model per server (one onnxruntime thread each on CPU). A
    client's sequence lives on one instance: keep ``clients_per_server >= instances``. At most
    4096."""
    bind: str = ""
    """Address the server listens on, an IPv4 address (tritonserver's HTTP endpoint takes no
    host name, its gRPC endpoint no IPv6 address: ``config_section_rules.bind_problem``);
    empty: the site profile's (``127.0.0.1`` for ``local``, ``0.0.0.0`` on a cluster, where
    clients run on other machines). ``make-dag`` writes the resolved address into the run's
    config."""
    ready_timeout_seconds: float = 180.0
    """How long ``serve`` waits for tritonserver to load its models and answer ready."""
    sequence_idle_seconds: float = 60.0
    """Triton's ``max_sequence_idle_microseconds``, in seconds."""
    exit_timeout_seconds: float = 5.0
    """Triton's ``--exit-timeout-secs``: how long a stopping server waits for open sequences
    (``serve`` kills it 10 s after that)."""
    monitor_seconds: float = 5.0
    """Triton's inference statistics are polled this often into ``RUN/monitor/<server>.csv``
    (0: not at all)."""
    unresponsive_seconds: float = 120.0
    """How long a running tritonserver may leave its liveness check unanswered (hung, or
    stopped) before ``serve`` ends the node as on a crash, to be restarted (0: never)."""


@dataclass(frozen=True)
class ClientConfig:
    """The client nodes."""

    in_flight: int = 8
    """Requests in flight on the stream."""
    server_wait_seconds: float = 300.0
    """How long a client waits for its server's address file."""
    request_timeout_seconds: float = 120.0
    """How long a client waits for the next response before failing."""
    read_seconds: float = 64.0
    """Data read from frames at a time (bounds the client's memory)."""
    checkpoint_requests: int = 16
    """Requests' worth of responses saved per checkpoint (where a retry resumes)."""
    connect_timeout_seconds: float = 10.0
    """Deadline of one connection attempt (liveness and model checks)."""
    max_reconnects: int = 5
    """Reconnections after a stream failure before the client gives up (and the DAG retries);
    at most 1000, as every retry count (``config_numbers.MAX_RETRIES``)."""
    failover_seconds: float = 600.0
    """How long a client waits for its assigned server (not published yet, not answering, or
    broken under it) before it continues on another live server of the campaign; 0: never."""


@dataclass(frozen=True)
class WorkflowConfig:
    """The DAG and its local executor."""

    retries: int = 2
    """DAGMan ``RETRY`` count of each client and merge node, and the server jobs'
    ``max_retries``; at most 1000 (``config_numbers.MAX_RETRIES``)."""
    max_parallel_clients: int = 0
    """Client nodes run at once (DAGMan ``MAXJOBS``); 0 means all; at most 10**6
    (``config_numbers.MAX_PARALLEL_NODES``)."""
    max_parallel_merges: int = 0
    """Shard merge nodes run at once (``MAXJOBS`` of their category); 0 means all; at most
    10**6."""


@dataclass(frozen=True)
class MergeConfig:
    """The merge: one node, or shard merges under an index (``merge/tree.py``)."""

    shard_seconds: float = 4096.0
    """Each shard merge writes the outputs of this much GPS time, the shards aligned to its
    multiples (a multiple of ``deepclean.frame_seconds``); 0: one merge node writes all."""


@dataclass(frozen=True)
class SiteConfig:
    """Where the DAG runs: shapes the submit files (see ``workflow/profiles.py``)."""

    profile: str = "local"
    """``local`` (run-local), ``ldg`` (LIGO Data Grid), ``osg`` (OSPool/IGWN pool), ``hepcloud``."""
    accounting_group: str = ""
    """IGWN accounting tag (``ligo.prod.o3.detchar.nonlin_coup.deepclean``); required on ``ldg``."""
    accounting_group_user: str = ""
    """The person a shared account's jobs are accounted to (``albert.einstein``)."""
    filesystem: str = ""
    """``shared`` or ``transfer`` (HTCondor file transfer); empty: the profile's default."""
    client_image: str = ""
    """Container image of the client and merge jobs (has offline-iaas); required with transfer."""
    image_executable: str = "/opt/offline-iaas/bin/offline-iaas"
    """Path of the offline-iaas command inside the images."""
    client_memory: str = "2GB"
    """Memory per client job (``request_memory``), with its unit."""
    client_disk: str = "2GB"
    """Scratch disk per client job (``request_disk``), with its unit."""
    merge_memory: str = "4GB"
    """Memory per merge job (shard merges and the index), with its unit."""
    merge_disk: str = "4GB"
    """Scratch disk per merge job, with its unit."""
    oauth_permissions: str = "gwdatafind.read"
    """Token scopes (``igwn_oauth_permissions``) asked for when frames come from datafind."""
