"""JHTDB's function names on the values endpoint: ``function=GetVariable`` with ``var=…`` (what
givernylocal sends), and the older names of JHTDB's SOAP/REST services and pyJHTDB, which
carry the variable and operator in the name: GetVelocity, GetPressureGradient,
GetVelocityHessian, GetMagneticFieldLaplacian, GetVelocityAndPressure, GetPosition, …"""

from __future__ import annotations

import re

from ..exceptions import InvalidRequestError

_OPERATORS = ("gradient", "hessian", "laplacian")
_NAME = re.compile(r"^get(?P<var>[a-z]+?)(?P<op>gradient|hessian|laplacian)?$")


def resolve(function: str, var: str | None, sop: str | None) -> tuple[list[str], str | None]:
    """The fields a request asks for, and the operator its function names (``None``: take
    ``sop``). ``GetVelocityAndPressure`` asks for two fields, answered side by side."""
    name = function.strip().lower()
    if name == "getvariable":
        if not var:
            raise InvalidRequestError("function=GetVariable needs var=… (velocity, pressure, …, position)")
        return [var], None
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
