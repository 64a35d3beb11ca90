"""The injected population of binary black holes, and its cosmology.

Draws (``draw_binaries``), all from one seeded generator:

- source-frame component masses uniform in ``[mass_min, mass_max]`` Msun each, sorted so
  that ``mass_1 >= mass_2``;
- aligned spins ``spin_1z``, ``spin_2z`` uniform in ``[-spin_max, spin_max]`` (magnitude
  uniform up to ``spin_max``, either orientation); in-plane spins zero;
- redshift uniform in comoving volume and source-frame time up to ``redshift_max``:
  ``p(z) ∝ dVc/dz / (1 + z)`` (the ``1 / (1 + z)`` is the time dilation: a constant rate
  per source-frame year is seen ``1 + z`` times slower), and the luminosity distance of
  ``z``; the cosmology is astropy's ``Planck18`` (``COSMOLOGY``);
- isotropic sky (``ra`` uniform, ``sin(dec)`` uniform) and orientation (``cos(inclination)``
  uniform), polarisation ``psi`` uniform in ``[0, pi)``, coalescence phase in ``[0, 2 pi)``.

``PopulationSpec.attrs`` is the description stored with an injection set (and ``synth.json``)
and carried beside every VT (``POPULATION_KEYS``): the ranges above, each distribution in
words, ``z_max`` and its luminosity distance, the cosmology and both volumes; ``synth`` adds
how many binaries it drew for those it injected (``drawn``, ``injected``) when it leaves out
the ones below ``network_snr_min``.

Horizon
    ``horizon_redshift``: the redshift at which the population's loudest binary (both
    masses at ``mass_max_msun``, both spins aligned at ``+spin_max``, face-on) reaches an
    optimal SNR of 8 in a network of ``detectors`` identical detectors all optimally oriented
    (directly overhead), against a given ASD. No binary of the population is louder, so a
    ``z_max`` beyond it leaves no findable binary undrawn: the search, not the volume, bounds
    VT.

Sensitive volume
    With injections drawn from ``p(z)``, the population's time-volume per detector-frame
    year is ``V_pop = int_0^z_max dVc/dz / (1 + z) dz`` (``time_volume_gpc3``), so a search
    that finds a fraction ``f`` of them in ``T`` years of data has ``VT = f V_pop T``: the
    same ``N = R VT`` as ``T int f(z) dVc/dz / (1 + z) dz`` for a rate ``R`` per Gpc^3 per
    source-frame year. ``Vc(z_max)`` (``comoving_volume_gpc3``) is the plain comoving volume
    the population fills (larger than ``V_pop``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np

from offline_iaas.config_sections import SynthConfig
from offline_iaas.search.waveforms import BinaryParameters, check_approximant

COSMOLOGY = "Planck18"
"""astropy's ``astropy.cosmology.Planck18`` (Planck 2018 TT,TE,EE+lowE+lensing+BAO)."""
_REDSHIFT_GRID = 4097
"""Points of the tabulated ``p(z)`` the redshifts are drawn from (inverse CDF)."""


@dataclass(frozen=True)
class PopulationSpec:
    """What ``draw_binaries`` draws from (module docstring); see ``SynthConfig``."""

    approximant: str
    f_lower_hz: float
    mass_min_msun: float
    mass_max_msun: float
    spin_max: float
    redshift_max: float

    def attrs(self) -> dict[str, Any]:
        """The population's description and volumes, as stored with an injection set
        (``POPULATION_KEYS``)."""
        return {
            "approximant": self.approximant,
            "f_lower_hz": self.f_lower_hz,
            "mass_min_msun": self.mass_min_msun,
            "mass_max_msun": self.mass_max_msun,
            "mass_distribution": MASS_DISTRIBUTION,
            "spin_max": self.spin_max,
            "spin_distribution": SPIN_DISTRIBUTION,
            "redshift_max": self.redshift_max,
            "redshift_distribution": REDSHIFT_DISTRIBUTION,
            "luminosity_distance_max_mpc": float(luminosity_distance_mpc(self.redshift_max)),
            "orientation_distribution": ORIENTATION_DISTRIBUTION,
            "cosmology": COSMOLOGY,
            "comoving_volume_gpc3": comoving_volume_gpc3(self.redshift_max),
            "time_volume_gpc3": time_volume_gpc3(self.redshift_max),
        }


MASS_DISTRIBUTION = ("source-frame m1, m2 each uniform in [mass_min_msun, mass_max_msun], "
                     "sorted m1 >= m2")
SPIN_DISTRIBUTION = "aligned: spin_1z, spin_2z each uniform in [-spin_max, spin_max]"
REDSHIFT_DISTRIBUTION = ("p(z) ~ dVc/dz / (1 + z) on [0, redshift_max] (uniform in comoving "
                         "volume and source-frame time)")
ORIENTATION_DISTRIBUTION = ("isotropic sky and orientation; psi uniform in [0, pi), phase in "
                            "[0, 2 pi)")
POPULATION_KEYS: tuple[str, ...] = (
    "approximant", "f_lower_hz", "mass_min_msun", "mass_max_msun", "mass_distribution",
    "spin_max", "spin_distribution", "redshift_max", "redshift_distribution",
    "luminosity_distance_max_mpc", "orientation_distribution", "cosmology",
    "comoving_volume_gpc3", "time_volume_gpc3", "network_snr_min", "drawn", "injected",
    "seed",
)
"""What describes a population beside its VT (``PopulationSpec.attrs`` and what ``synth``
adds); ``search/injection_list.py`` carries these keys of an injection list into the merge."""


def population_spec(synth: SynthConfig, source: Any = None) -> PopulationSpec:
    """The ``[synth]`` population (its keys of the same names), its approximant checked
    (ConfigError naming the key)."""
    check_approximant(synth.approximant, "synth.approximant", source)
    return PopulationSpec(**{f.name: getattr(synth, f.name) for f in fields(PopulationSpec)})


# ---- cosmology ------------------------------------------------------------------------------


def _cosmology(name: str = COSMOLOGY) -> Any:
    """astropy's cosmology ``name`` (``Planck18``, ``Planck15``, ...)."""
    from astropy import cosmology

    return getattr(cosmology, name)


def _differential_volume_gpc3(z: np.ndarray, cosmology: str = COSMOLOGY) -> np.ndarray:
    """``dVc/dz`` over the whole sky (Gpc^3 per unit redshift)."""
    per_sr = _cosmology(cosmology).differential_comoving_volume(z).to_value("Gpc3 / sr")
    return 4.0 * np.pi * per_sr


@lru_cache(maxsize=8)
def _redshift_table(redshift_max: float) -> tuple[np.ndarray, np.ndarray]:
    """``(z, CDF(z))`` of ``p(z) ∝ dVc/dz / (1 + z)`` on ``[0, redshift_max]``."""
    z = np.linspace(0.0, redshift_max, _REDSHIFT_GRID)
    density = _differential_volume_gpc3(z) / (1.0 + z)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(z))])
    return z, cdf / cdf[-1]


def comoving_volume_gpc3(redshift_max: float, cosmology: str = COSMOLOGY) -> float:
    """Comoving volume ``Vc(z_max)`` of the whole sky out to ``redshift_max`` (Gpc^3)."""
    return float(_cosmology(cosmology).comoving_volume(redshift_max).to_value("Gpc3"))


@lru_cache(maxsize=8)
def time_volume_gpc3(redshift_max: float, cosmology: str = COSMOLOGY) -> float:
    """``int_0^z_max dVc/dz / (1 + z) dz`` (Gpc^3) in astropy's ``cosmology``: the
    population's VT per detector-frame year (module docstring)."""
    from scipy import integrate

    value, _ = integrate.quad(
        lambda z: float(_differential_volume_gpc3(np.array([z]), cosmology)[0]) / (1.0 + z),
        0.0, redshift_max, epsrel=1e-10,
    )
    return float(value)


def luminosity_distance_mpc(redshift: Any, cosmology: str = COSMOLOGY) -> np.ndarray:
    """Luminosity distance (Mpc) of ``redshift`` (scalar or array) in astropy's flat
    ``cosmology``."""
    if np.size(redshift) == 0:
        return np.zeros(np.shape(redshift))
    return np.asarray(_cosmology(cosmology).luminosity_distance(redshift).to_value("Mpc"),
                      np.float64)


def redshift_at_distance(distance_mpc: Any, cosmology: str = COSMOLOGY) -> np.ndarray:
    """The redshift whose luminosity distance is ``distance_mpc`` (Newton's method, to
    ~1e-12 relative), the inverse of ``luminosity_distance_mpc``."""
    if np.size(distance_mpc) == 0:
        return np.zeros(np.shape(distance_mpc))
    cosmo = _cosmology(cosmology)
    d = np.atleast_1d(np.asarray(distance_mpc, np.float64))
    hubble = cosmo.hubble_distance.to_value("Mpc")
    z = d / hubble  # the low-redshift limit
    for _ in range(50):
        comoving = cosmo.comoving_distance(z).to_value("Mpc")
        # flat universe: dL = (1 + z) Dc, dDc/dz = D_H / E(z)
        slope = comoving + (1.0 + z) * hubble / cosmo.efunc(z)
        step = ((1.0 + z) * comoving - d) / slope
        z = np.maximum(z - step, 0.0)
        if np.all(np.abs(step) <= 1e-13 * np.maximum(z, 1e-6)):
            break
    return z.reshape(np.shape(distance_mpc))


# ---- the draw --------------------------------------------------------------------------------


def draw_redshifts(redshift_max: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` redshifts from ``p(z) ∝ dVc/dz / (1 + z)`` on ``[0, redshift_max]``."""
    z, cdf = _redshift_table(float(redshift_max))
    return np.interp(rng.uniform(size=count), cdf, z)


def draw_binaries(
    spec: PopulationSpec, count: int, rng: np.random.Generator, gps_time: float = 0.0
) -> list[BinaryParameters]:
    """``count`` binaries of the population (module docstring), all at ``gps_time`` (set
    each one's time with ``dataclasses.replace``)."""
    masses = rng.uniform(spec.mass_min_msun, spec.mass_max_msun, size=(count, 2))
    mass_1, mass_2 = masses.max(axis=1), masses.min(axis=1)
    spins = rng.uniform(-spec.spin_max, spec.spin_max, size=(count, 2))
    redshift = draw_redshifts(spec.redshift_max, count, rng)
    distance = luminosity_distance_mpc(redshift)
    ra = rng.uniform(0.0, 2.0 * np.pi, size=count)
    dec = np.arcsin(rng.uniform(-1.0, 1.0, size=count))
    inclination = np.arccos(rng.uniform(-1.0, 1.0, size=count))
    psi = rng.uniform(0.0, np.pi, size=count)
    phase = rng.uniform(0.0, 2.0 * np.pi, size=count)
    return [
        BinaryParameters(
            mass_1=float(mass_1[i]), mass_2=float(mass_2[i]), redshift=float(redshift[i]),
            luminosity_distance=float(distance[i]), inclination=float(inclination[i]),
            polarization=float(psi[i]), ra=float(ra[i]), dec=float(dec[i]),
            coalescence_phase=float(phase[i]), gps_time=float(gps_time),
            spin_1z=float(spins[i, 0]), spin_2z=float(spins[i, 1]),
        )
        for i in range(count)
    ]


HORIZON_SNR = 8.0
"""Optimal SNR at the horizon (module docstring)."""


def horizon_redshift(spec: PopulationSpec, asd: Callable[[np.ndarray], np.ndarray],
                     sample_rate: float, detectors: int = 2, snr: float = HORIZON_SNR) -> float:
    """The redshift where the population's loudest binary, face-on and overhead every one of
    ``detectors`` identical detectors of ASD ``asd`` (1/sqrt(Hz)), has an optimal network SNR
    of ``snr`` (module docstring); sampled at ``sample_rate``, integrated from ``f_lower_hz``."""
    from scipy import optimize

    from offline_iaas.search.waveforms import optimal_snr, polarizations

    def loudness(z: float) -> float:
        binary = BinaryParameters(
            mass_1=spec.mass_max_msun, mass_2=spec.mass_max_msun, redshift=z,
            luminosity_distance=float(luminosity_distance_mpc(z)), inclination=0.0,
            polarization=0.0, ra=0.0, dec=0.0, coalescence_phase=0.0, gps_time=0.0,
            spin_1z=spec.spin_max, spin_2z=spec.spin_max)
        # face-on, overhead: the strain is h+ (F+ = 1, Fx = 0), and every detector sees it
        waves = polarizations(binary, spec.approximant, sample_rate, spec.f_lower_hz)
        single = optimal_snr(waves.plus, sample_rate, asd, spec.f_lower_hz)
        return single * np.sqrt(detectors) - snr

    low, high = 1e-3, 1.0
    while loudness(high) > 0:
        low, high = high, 2.0 * high
        if high > 100.0:
            raise ValueError(f"no horizon below z = 100 for {spec}")
    return float(optimize.brentq(loudness, low, high, xtol=1e-4))
