"""The metadata document JHTDB's Python client (givernylocal) downloads before any request
and validates against its schema (``TurbulenceDB``): turbdb's datasets described in JHTDB's
terms — variables and their components, which spatial method offers which operator, the
time and space limits, the client's constants. The server serves it at
``/turbulence-svc/metadata``; :class:`turbdb.jhtdb.turb_dataset` builds it locally."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..info import DatasetInfo

# The public token every JHTDB client script ships with (a server treats it as no token).
TESTING_TOKEN = "edu.jhu.pha.turbulence.testing-201406"
# givernylocal's placeholder for "not a time series" and for missing values.
PLACEHOLDER = -999.9
# JHTDB's most points per getData request, used where no server limit applies.
JHTDB_MAX_DATA_POINTS = 2_000_000
# Decimals of the cutout coordinates (xcoor, …), as JHTDB rounds them.
DECIMALS = 7

# Which spatial method computes which operator in turbdb's engine (turbdb-core
# interp/method.rs: Method::operators); tests/jhtdb checks it against the engine.
OPERATOR_METHODS: dict[str, tuple[str, ...]] = {
    "field": ("none", "lag4", "lag6", "lag8", "m1q4", "m2q8"),
    "gradient": ("lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m1q4", "m2q8"),
    "hessian": ("lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m2q8"),
    "laplacian": ("lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m2q8"),
}
# Cells each method's stencil reaches below and above the point's cell (JHTDB's
# bucketIndices, part of the schema).
BUCKET_INDICES = {"none": [0, 1], "lag4": [1, 2], "lag6": [2, 3], "lag8": [3, 4], "m1q4": [1, 2], "m2q8": [3, 4],
                  "fd4noint": [2, 3], "fd6noint": [3, 4], "fd8noint": [4, 5], "fd4lag4": [3, 4]}
# Particle tracking (var=position): Lagrange in space, PCHIP in time, as JHTDB's GetPosition.
POSITION_METHODS = ("lag4", "lag6", "lag8")


def check_position_arguments(method: str, operator: str, temporal: str, delta_t: float) -> None:
    """Refuses what the metadata document excludes for ``var=position`` (the same check
    locally and on the server): it tracks particles with a Lagrange method, PCHIP in time,
    forward or back from ``timepoint_original`` to ``timepoint_end`` in steps ``delta_t``."""
    from ..exceptions import InvalidRequestError

    if operator != "field":
        raise InvalidRequestError(f"the 'position' variable takes spatial_operator 'field', not {operator!r}: it "
                                  "tracks particles")
    if method not in POSITION_METHODS:
        raise InvalidRequestError(f"the 'position' variable takes spatial method {', '.join(POSITION_METHODS)}, "
                                  f"not {method!r}")
    if temporal != "pchip":
        raise InvalidRequestError(f"the 'position' variable takes temporal method 'pchip', not {temporal!r}: "
                                  "particles move between stored steps")
    if not delta_t > 0:
        raise InvalidRequestError(f"delta_t must be positive, not {delta_t:g}: the direction of the tracking "
                                  "comes from timepoint_original and time_end")


def component_codes(field: str, ncomp: int) -> list[str]:
    """JHTDB's names of a field's components (ux, uy, uz; p; …)."""
    from .columns import columns

    return columns(field, ncomp, "field")


def document(infos: Iterable[DatasetInfo], *, max_data_points: int = JHTDB_MAX_DATA_POINTS,
             source: str = "turbdb") -> dict[str, Any]:
    """The givernylocal metadata document (``jhtdb_config.json``'s layout) of ``infos``."""
    infos = list(infos)
    variables: dict[str, dict[str, Any]] = {}
    datasets = []
    for info in infos:
        for name, field in info.fields.items():
            variables.setdefault(name, _variable(name, component_codes(name, field.ncomp)))
        if _trackable(info):
            variables.setdefault("position", _variable("position", ["x", "y", "z"]))
        datasets.append(_dataset(info))
    return {
        "name": "turbdb",
        "description": f"turbdb datasets ({source})",
        "pickled_metadata_filepath": "",
        "variables": list(variables.values()),
        "spatial_operators": [{"code": op, "name": op.capitalize(), "description": None} for op in OPERATOR_METHODS],
        "spatial_methods": [{"code": m, "name": m, "description": None, "bucketIndices": b}
                            for m, b in BUCKET_INDICES.items()],
        "temporal_methods": [{"code": "none", "name": "none", "description": None},
                             {"code": "pchip", "name": "pchip", "description": None}],
        "giverny_constants": {
            "maximum_processes": 1,
            "missing_value_placeholder": PLACEHOLDER,
            "bytes_per_datapoint": 4,
            "max_cutout_size": 16.0,
            "max_local_cutout_size": 3072.0,
            "max_data_points": int(max_data_points),
            "max_num_chunks": 2**31 - 1,
            "decimals": DECIMALS,
            "pyJHTDB_testing_token": TESTING_TOKEN,
            "turbulence_email_address": "the operator of this turbdb server",
        },
        "datasets": datasets,
    }


def as_loaded(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as givernylocal keeps it after loading (``cube.metadata``): datasets by
    code, the constants under ``constants``."""
    return {"name": doc["name"], "description": doc["description"],
            "pickled_metadata_filepath": doc["pickled_metadata_filepath"], "variables": doc["variables"],
            "spatial_operators": doc["spatial_operators"], "spatial_methods": doc["spatial_methods"],
            "temporal_methods": doc["temporal_methods"], "constants": doc["giverny_constants"],
            "datasets": {d["code"]: d for d in doc["datasets"]}}


def _variable(code: str, components: list[str]) -> dict[str, Any]:
    return {"code": code, "name": code.capitalize(), "description": None, "component_codes": components,
            "cardinality": len(components)}


def _trackable(info: DatasetInfo) -> bool:
    return "velocity" in info.fields and info.fields["velocity"].ncomp == 3


def _dataset(info: DatasetInfo) -> dict[str, Any]:
    times = info.times
    tlims = {"lower": repr(float(times[0])) if len(times) else "0",
             "upper": repr(float(times[-1])) if len(times) else "0",
             "n": int(len(times)), "isPeriodic": False, "isDiscrete": False,
             # Cutouts name stored steps 1…n (index ts−1); getData takes physical times.
             "timeIndexShift": {"getcutout": -1, "getdata": 0}}
    if info.dt is not None:
        tlims["dt"] = info.dt
    space = {}
    for axis, (lower, upper), n, spacing, periodic in zip("xyz", info.domain, info.grid, info.spacing, info.periodic):
        space[f"{axis}lims"] = {"lower": repr(lower), "upper": repr(upper), "n": int(n), "isPeriodic": bool(periodic),
                                "spacing": float(spacing)}
    variables = []
    for name in info.fields:
        variables.append({
            "code": name, "name": name.capitalize(), "isPersistent": True,
            "offsets": [{"code": name, "coordinate": list(info.origin)}],
            "spatialOperatorMethods": [{"operator": op, "methods": list(methods)}
                                       for op, methods in OPERATOR_METHODS.items()],
            "temporalMethods": ["none", "pchip"],
        })
    if _trackable(info):
        variables.append({
            "code": "position", "name": "Position", "isPersistent": False,
            "offsets": [{"code": "position", "coordinate": list(info.origin)}],
            "spatialOperatorMethods": [{"operator": "field", "methods": list(POSITION_METHODS)}],
            "temporalMethods": ["pchip"],
        })
    return {"code": info.name, "name": info.name, "description": None,
            "storage": {"filepath": info.name, "chunks": [info.atom] * 3},
            "simulation": {"tlims": tlims, **space},
            "physicalVariables": variables}
