"""The scenario zoo: every case, from fx2onnx's own modules and from torch's export database.

.. code-block:: python

    from fx2onnx.scenarios.cases import get_cases

    cases = get_cases()
    print(len(cases), cases["CondOnValue"].doc)
"""

from __future__ import annotations

import functools
import importlib

from .case import Case, collect_cases
from .exportdb import exportdb_cases

#: family name -> module defining the zoo cases of that family
ZOO_FAMILIES: dict[str, str] = {
    "signatures": ".cases_signatures",
    "control_flow": ".cases_control_flow",
    "mutations": ".cases_mutations",
    "types": ".cases_types",
}
EXPORTDB = "exportdb"
FAMILIES = [*ZOO_FAMILIES, EXPORTDB]


@functools.lru_cache(maxsize=None)
def _family_cases(family: str) -> tuple[Case, ...]:
    if family == EXPORTDB:
        return tuple(exportdb_cases())
    if family not in ZOO_FAMILIES:
        raise ValueError(f"Unknown family {family!r}, expected one of {FAMILIES}.")
    module = importlib.import_module(ZOO_FAMILIES[family], __package__)
    return tuple(collect_cases(module, family))


def get_cases(families: list[str] | tuple[str, ...] | None = None) -> dict[str, Case]:
    """All the cases (or those of some families) by name, in a stable order."""
    cases: dict[str, Case] = {}
    for family in families or FAMILIES:
        for case in _family_cases(family):
            if case.name in cases:
                raise ValueError(f"Two cases are named {case.name!r}.")
            cases[case.name] = case
    return cases


def get_case(name: str) -> Case:
    """One case by name; exportdb cases are prefixed with ``exportdb_``."""
    families = [EXPORTDB] if name.startswith("exportdb_") else list(ZOO_FAMILIES)
    cases = get_cases(families)
    if name not in cases:
        raise KeyError(f"No scenario named {name!r}; see fx2onnx.scenarios.cases.get_cases().")
    return cases[name]
