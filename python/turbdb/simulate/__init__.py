"""Built-in flow generators: a pseudo-spectral DNS of forced isotropic turbulence (physics)
and random-phase synthetic fields (performance work), both yielding ``Snapshot``s."""

from turbdb.simulate.dns import DNSConfig, run_dns
from turbdb.simulate.snapshot import Snapshot
from turbdb.simulate.synthetic import synthetic_snapshots

__all__ = ["DNSConfig", "run_dns", "Snapshot", "synthetic_snapshots"]
