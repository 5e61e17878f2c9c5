"""JHTDB's column names of a query's values (``ux uy uz``, ``duxdx …``, ``d2uxdxdy …``), shared
by the JHTDB endpoint, ``getData`` and ``turbdb query --out x.csv``; kept out of
:mod:`turbdb.service` so that naming a CSV's columns does not import the web framework."""

from __future__ import annotations

# JHTDB's symbol of each variable in column names (duxdx, dpdx, d2bxdxdy, …).
SYMBOLS = {"velocity": "u", "magneticfield": "b", "vectorpotential": "a", "force": "f", "pressure": "p",
           "temperature": "t", "energy": "e", "density": "rho"}
HESSIAN_PAIRS = ("xx", "xy", "xz", "yy", "yz", "zz")


def columns(field: str, ncomp: int, operator: str) -> list[str]:
    """JHTDB's column names for ``operator`` of ``field``, in the order of the values of
    ``Dataset.query(...).reshape(N, -1)``: gradient ``[:, c, a]`` is row-major over c, a
    (duxdx, duxdy, duxdz, duydx, …), Hessian per component xx, xy, xz, yy, yz, zz."""
    if field == "position":
        return ["x", "y", "z"]
    symbol = SYMBOLS.get(field, field)
    comps = [f"{symbol}{a}" for a in "xyz"] if ncomp == 3 else [symbol] if ncomp == 1 else \
        [f"{symbol}{i}" for i in range(ncomp)]
    if operator == "field":
        return comps
    if operator == "gradient":
        return [f"d{c}d{a}" for c in comps for a in "xyz"]
    if operator == "hessian":
        return [f"d2{c}d{a}d{b}" for c in comps for a, b in HESSIAN_PAIRS]
    return [f"grad2{c}" for c in comps]
