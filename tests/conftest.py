"""Datasets shared by several test modules, built once per session: a small DNS (real
turbulence, for tracking and the R–Q teardrop) and a synthetic random-phase field of the
same size (Gaussian: no teardrop)."""

import dataclasses

import pytest

import turbdb
from turbdb.simulate import DNSConfig, run_dns, synthetic_snapshots

#: 32³ DNS, 12 stored steps 0.16 apart (two solver steps each): about 2 s to make.
DNS_GRID, DNS_STEPS, DNS_SAVE_EVERY = 32, 12, 2


@pytest.fixture(scope="session")
def dns32(tmp_path_factory) -> turbdb.Dataset:
    """Forced isotropic turbulence on 32³ (Re_λ ≈ 25), velocity and pressure stored."""
    config = DNSConfig(n=DNS_GRID)
    snaps = list(run_dns(config, n_saved=DNS_STEPS, save_every=DNS_SAVE_EVERY))
    # The provenance turbdb simulate records: the spectrum and the demo read nu, n and kf from it.
    provenance = {"generator": "tests/conftest.py", **{f"dns_{k}": v for k, v in dataclasses.asdict(config).items()}}
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("dns32"), "dns32", grid=(DNS_GRID,) * 3,
                               times=[s.time for s in snaps], provenance=provenance)
    for s in snaps:
        ds.write("velocity", s.step, s.velocity)
        ds.write("pressure", s.step, s.pressure)
    return ds


@pytest.fixture(scope="session")
def synthetic32(tmp_path_factory) -> turbdb.Dataset:
    """A random-phase Kolmogorov field on 32³, 3 stored steps: Gaussian statistics."""
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("syn32"), "syn32", grid=(32, 32, 32), times=[0.0, 0.01, 0.02])
    for s in synthetic_snapshots(32, n_steps=3, dt=0.01, seed=1):
        ds.write("velocity", s.step, s.velocity)
        ds.write("pressure", s.step, s.pressure)
    return ds
