"""Every operator of torch's core ATen set (``torch.Tag.core``) has a converter or a documented reason."""

from __future__ import annotations

import torch

from fx2onnx.convert import registry

aten = torch.ops.aten

#: core operators without a converter, and why
EXEMPTIONS: dict[str, str] = {
    "aten::resize_": "in-place storage resize: ONNX values have no storage and torch.export functionalizes "
    "it away (a graph that keeps it is refused by UnsupportedOpError naming the node)",
    "aten::atan2.out": "out= variant: torch.export functionalizes it into aten::atan2 which has a converter",
}


def core_overloads() -> list[torch._ops.OpOverload]:
    """Every overload of torch.ops.aten tagged core (schemas of every registered aten op)."""
    seen: set[tuple[str, str]] = set()
    ops = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        key = (schema.name[len("aten::") :], schema.overload_name or "default")
        if key in seen:
            continue
        seen.add(key)
        try:
            op = getattr(getattr(aten, key[0]), key[1])
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in op.tags:
            ops.append(op)
    return ops


def _name(op: torch._ops.OpOverload) -> str:
    name = op.name()
    return name[: -len(".default")] if name.endswith(".default") else name


def test_core_set_is_enumerated():
    ops = core_overloads()
    assert len(ops) > 150, f"only {len(ops)} core overloads found: the enumeration is broken"


def test_every_core_op_has_a_converter():
    missing = sorted(_name(op) for op in core_overloads() if registry.lookup(op) is None)
    unexplained = [m for m in missing if m not in EXEMPTIONS]
    assert not unexplained, (
        f"{len(unexplained)} core ATen operators have no converter and no documented exemption: "
        f"{', '.join(unexplained)}. Add a converter in src/fx2onnx/convert/ops/ or a reason in EXEMPTIONS."
    )


def test_exemptions_are_still_needed():
    names = {_name(op) for op in core_overloads()}
    stale = sorted(n for n in EXEMPTIONS if n not in names or registry.lookup(_lookup(n)) is not None)
    assert not stale, f"exempted operators now converted or no longer core (remove them): {stale}"


def _lookup(name: str) -> torch._ops.OpOverload:
    packet, _, overload = name[len("aten::") :].partition(".")
    return getattr(getattr(aten, packet), overload or "default")
