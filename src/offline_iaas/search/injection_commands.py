"""The injection-set subcommands' arguments and actions: ``convert-injections`` and
``draw-injections`` (``cli.py`` registers them; errors reach its exit-code mapping)."""

from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from offline_iaas.bounded_read import NotRegularFile, refuse_unless_regular
from offline_iaas.errors import ConfigError

logger = logging.getLogger("offline_iaas.cli")

CONVERT_HELP = ("convert an injection set between LIGO_LW sim_inspiral (.xml, .xml.gz) and "
                "HDF5 (.h5, .hdf5: this project's layout or aframe's)")
DRAW_HELP = ("draw an injection set for the campaign's span from its frames: the [synth] "
             "population, one injection per interval, the SNR cut at each injection's own "
             "time against the PSD measured there")
LAYOUT_HELP = ("HDF5 layout: this project's (source-frame masses, Cartesian spins, both "
               "SNRs) or aframe's InjectionParameterSet (detector-frame masses, spin angles, "
               "ifo_snrs)")
OVERWRITE_HELP = ("replace an existing file at the target (refused without it: it may be a "
                  "campaign's output or its injection set); a link there is replaced itself, "
                  "not followed; a directory, FIFO, device or socket is refused even with it")


def add_convert_arguments(p: argparse.ArgumentParser) -> None:
    """``convert-injections SOURCE TARGET [--layout] [...]``."""
    p.add_argument("source", type=Path, help="injection file to read")
    p.add_argument("target", type=Path, help="injection file to write (format by suffix)")
    p.add_argument("--layout", choices=("offline-iaas", "aframe"), default="offline-iaas",
                   help=LAYOUT_HELP)
    p.add_argument("--approximant", help="where SOURCE does not say it (aframe's files)")
    p.add_argument("--f-lower-hz", type=float, help="where SOURCE does not say it")
    p.add_argument("--reference-frequency-hz", type=float,
                   help="where SOURCE does not say it (default: its f_lower; aframe's "
                   "files: 50 Hz, aframe's configs)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)


def refuse_existing_target(target: Path, overwrite: bool, command: str) -> None:
    """ConfigError naming ``target`` where a file (or a link, even a dangling one) is there
    and ``--overwrite`` was not given: the command would replace it whole (a campaign's
    output, another set). A directory, a FIFO, a device or a socket there is refused even
    with ``--overwrite``, naming its kind, before anything is read or drawn (no injection set;
    what reads or writes it would find it gone). A link is replaced itself, never followed, as
    every writer of the project's replaces a link at its target
    (``atomic.replaced_atomically``): what it leads to is left as it is."""
    try:
        mode = os.lstat(target).st_mode
    except OSError:  # nothing there (or not reachable: the write's error names it)
        return
    if not stat.S_ISLNK(mode):
        try:
            refuse_unless_regular(target)  # not a link: its own mode
        except NotRegularFile as err:
            raise ConfigError(f"{target} is {err} ({command} replaces only a regular file or a "
                              "link, even with --overwrite): give another target") from None
        except OSError:
            return
    if overwrite:
        return
    raise ConfigError(f"{target}: already exists ({command} would replace it): give another "
                      "target, or --overwrite to replace it")


def refuse_bad_stand_ins(args: argparse.Namespace) -> None:
    """ConfigError naming the option whose value the file's reader would refuse as the
    file's own attribute (``injection_set.is_number``), or an approximant lalsimulation
    cannot generate (synth's check): else the target is written and then not read back."""
    from offline_iaas.search.injection_set import is_number

    for option, value in (("--f-lower-hz", args.f_lower_hz),
                          ("--reference-frequency-hz", args.reference_frequency_hz)):
        if value is not None and not is_number(value):
            raise ConfigError(f"{option} must be a positive number of Hz, not {value:g}")
    if args.approximant is not None:
        from offline_iaas.search.waveforms import check_approximant

        check_approximant(args.approximant, "--approximant")


def cmd_convert(args: argparse.Namespace) -> None:
    from offline_iaas.search.injection_file import read_injection_set, write_injection_set

    if args.target.exists() and args.source.exists() and args.target.samefile(args.source):
        raise ConfigError(f"{args.target}: is the source file {args.source} (converted files "
                          "lose what the other format has no column for): give another target")
    refuse_existing_target(args.target, args.overwrite, "convert-injections")
    refuse_bad_stand_ins(args)
    injections = read_injection_set(args.source, args.approximant, args.f_lower_hz,
                                    args.reference_frequency_hz)
    write_injection_set(args.target, injections, layout=args.layout)
    logger.info(f"convert-injections: {len(injections)} injections from {args.source} to "
                f"{args.target}")


def add_draw_arguments(p: argparse.ArgumentParser) -> None:
    """``draw-injections CONFIG --out FILE [--interval-seconds | --rate-per-30s] [...]``."""
    p.add_argument("--out", type=Path, required=True,
                   help="injection file to write (.h5, .hdf5, .xml, .xml.gz)")
    every = p.add_mutually_exclusive_group()
    every.add_argument("--interval-seconds", type=float,
                       help="one injection every this many seconds (default 30)")
    every.add_argument("--rate-per-30s", type=float,
                       help="injections per 30 s of data (the interval is 30 / RATE s)")
    p.add_argument("--layout", choices=("offline-iaas", "aframe"), default="offline-iaas",
                   help=LAYOUT_HELP + "; aframe's with the projected waveforms too "
                   "(InterferometerResponseSet: waveforms/h1, ...)")
    p.add_argument("--network-snr-min", type=float,
                   help="optimal network SNR cut (default synth.network_snr_min)")
    p.add_argument("--seed", type=int, help="default synth.seed (0 to 2**63 - 1)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)


def cmd_draw(args: argparse.Namespace) -> None:
    from offline_iaas.config import load_config
    from offline_iaas.config_numbers import INTEGER_LIMIT
    from offline_iaas.errors import ConfigError
    from offline_iaas.search.draw_injections import draw_injection_set, frame_strain_reader
    from offline_iaas.search.injection_file import file_format, write_injection_set
    from offline_iaas.search.response_set import write_response_set

    file_format(args.out)
    refuse_existing_target(args.out, args.overwrite, "draw-injections")
    if args.rate_per_30s is not None and not args.rate_per_30s > 0:
        raise ConfigError(f"--rate-per-30s must be > 0, not {args.rate_per_30s:g}")
    if args.interval_seconds is not None and not args.interval_seconds > 0:
        raise ConfigError(f"--interval-seconds must be > 0, not {args.interval_seconds:g}")
    if args.network_snr_min is not None and not args.network_snr_min >= 0:  # NaN too
        raise ConfigError(f"--network-snr-min must be >= 0, not {args.network_snr_min:g}")
    if args.seed is not None and not 0 <= args.seed < INTEGER_LIMIT:  # as synth.seed
        raise ConfigError(f"--seed must be in [0, 2**63) (a 64-bit integer), not {args.seed}")
    interval = (30.0 / args.rate_per_30s if args.rate_per_30s is not None
                else args.interval_seconds or 30.0)
    config = load_config(args.config, args.set)
    snr_min = (config.synth.network_snr_min if args.network_snr_min is None
               else args.network_snr_min)
    seed = config.synth.seed if args.seed is None else args.seed
    injections, drawn = draw_injection_set(config, interval, snr_min, seed,
                                           frame_strain_reader(config.data))
    if args.layout == "aframe" and file_format(args.out) == "hdf5":
        # aframe's InterferometerResponseSet: at the model's rate, as aframe's files are
        write_response_set(args.out, injections, config.data.sample_rate, injections.ifos,
                           drawn.waves)
    else:
        write_injection_set(args.out, injections, layout=args.layout)
    attrs = injections.attrs
    logger.info(f"draw-injections: {attrs['injected']} injections ({attrs['drawn']} drawn, "
                f"{attrs['drawn'] - attrs['injected']} below network SNR {snr_min:g} at "
                f"their own time) every {interval:g} s to {args.out}")
