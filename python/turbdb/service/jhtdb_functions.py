"""JHTDB's function names on the values endpoint: ``function=GetVariable`` with ``var=…`` (what
givernylocal sends), and the older names of JHTDB's SOAP/REST services and pyJHTDB, which
carry the variable and operator in the name: GetVelocity, GetPressureGradient,
GetVelocityHessian, GetMagneticFieldLaplacian, GetVelocityAndPressure, GetPosition, …
JHTDB functions turbdb does not offer (:data:`NOT_OFFERED`) are refused by name, with what
to use instead; read as variables they got "'boxfilter' is not a variable"."""

from __future__ import annotations

import re

from ..exceptions import InvalidRequestError

_OPERATORS = ("gradient", "hessian", "laplacian")
_CUTOUT = "/turbulence-svc/cutout/api/local, getCutout or Dataset.cutout"
#: Prefixes of the JHTDB function names turbdb does not offer (lower case), and what to use instead.
NOT_OFFERED = {
    "getboxfiltersgs": f"no equivalent: read a box-filtered cutout (filter_width=… on {_CUTOUT}) and the "
                       "unfiltered products, and form the stresses from them",
    "getboxfiltergradient": f"no equivalent: differentiate a box-filtered cutout (filter_width=… on {_CUTOUT})",
    "getboxfilter": f"box-filtered values are offered on cutouts: filter_width=… on {_CUTOUT}",
    "getthreshold": f"no equivalent: read a cutout ({_CUTOUT}) and select the nodes above the threshold",
    "getinvariant": "no equivalent: compute the invariants from the velocity gradient (GetVelocityGradient, or "
                    "sop=gradient)",
    "getraw": f"the stored values of a box are a cutout: {_CUTOUT}",
}
_NAME = re.compile(r"^get(?P<var>[a-z]+?)(?P<op>gradient|hessian|laplacian)?$")


def resolve(function: str, var: str | None, sop: str | None) -> tuple[list[str], str | None]:
    """The fields a request asks for, and the operator its function names (``None``: take
    ``sop``). ``GetVelocityAndPressure`` asks for two fields, answered side by side."""
    name = function.strip().lower()
    if name == "getvariable":
        if not var:
            raise InvalidRequestError("function=GetVariable needs var=… (velocity, pressure, …, position)")
        return [var], None
    for prefix, instead in NOT_OFFERED.items():
        if name.startswith(prefix):
            raise InvalidRequestError(f"turbdb does not offer JHTDB's function {function!r}; {instead}")
    match = _NAME.match(name)
    if match is None:
        raise InvalidRequestError(f"function {function!r} is not offered; use GetVariable with var=…, or a JHTDB "
                                  "function name such as GetVelocity, GetPressureGradient, GetVelocityHessian, "
                                  "GetVelocityLaplacian, GetVelocityAndPressure, GetPosition")
    fields = match["var"].split("and") if "and" in match["var"] else [match["var"]]
    if var and [var.lower()] != fields:
        raise InvalidRequestError(f"function {function!r} asks for {' and '.join(fields)}, but var={var!r}; "
                                  "leave var out or use function=GetVariable")
    operator = match["op"]
    if operator and sop and sop.strip().lower() not in ("field", "function", operator):
        raise InvalidRequestError(f"function {function!r} computes the {operator}, but sop={sop!r}")
    return fields, operator
