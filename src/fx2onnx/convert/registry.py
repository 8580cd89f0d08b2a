"""Registration and lookup of converters, one per aten overload.

A converter has the signature ``fn(ctx, node, *args, **kwargs)``: ``args`` are the
FX node's arguments where every FX node was replaced by its ONNX value
(``onnx_ir.Value``) and the rest left as Python constants. It returns a value or
a tuple of values, one per output of the FX node.

.. code-block:: python

    import torch
    from fx2onnx.convert.registry import converter

    @converter(torch.ops.aten.relu.default)
    def convert_relu(ctx, node, x):
        return ctx.op.Relu(x)
"""

from __future__ import annotations

from typing import Any, Callable

ConverterFunction = Callable[..., Any]

_REGISTRY: dict[Any, ConverterFunction] = {}
#: converters of nodes taking or producing complex tensors (carried as real pairs,
#: a trailing dimension of 2), looked up instead of ``_REGISTRY`` for such nodes
_COMPLEX_REGISTRY: dict[Any, ConverterFunction] = {}


def _overloads(target: Any) -> list[Any]:
    """Expands an OpOverloadPacket into all its overloads, keeps anything else."""
    if hasattr(target, "overloads") and hasattr(target, "_qualified_op_name"):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


def converter(*targets: Any) -> Callable[[ConverterFunction], ConverterFunction]:
    """Decorator registering a function as the converter of ``targets``.

    A target is an OpOverload (``torch.ops.aten.add.Tensor``), an OpOverloadPacket
    (all its overloads) or any other FX call target (``operator.getitem``).
    """

    def decorator(fn: ConverterFunction) -> ConverterFunction:
        for target in targets:
            for overload in _overloads(target):
                _REGISTRY[overload] = fn
        return fn

    return decorator


def complex_converter(*targets: Any) -> Callable[[ConverterFunction], ConverterFunction]:
    """Decorator registering the converter used when a node of ``targets`` takes or produces
    a complex tensor; such tensors are carried as real pairs (a trailing dimension of 2)."""

    def decorator(fn: ConverterFunction) -> ConverterFunction:
        for target in targets:
            for overload in _overloads(target):
                _COMPLEX_REGISTRY[overload] = fn
        return fn

    return decorator


def lookup_complex(target: Any) -> ConverterFunction | None:
    """Returns the converter handling complex values for ``target`` or None."""
    fn = _COMPLEX_REGISTRY.get(target)
    if fn is None and hasattr(target, "overloadpacket"):
        fn = _COMPLEX_REGISTRY.get(target.overloadpacket)
    if fn is None:
        main = lookup(target)
        if getattr(main, "supports_complex", False):
            fn = main
    return fn


def lookup(target: Any) -> ConverterFunction | None:
    """Returns the converter registered for ``target`` or None."""
    fn = _REGISTRY.get(target)
    if fn is None and hasattr(target, "overloadpacket"):
        fn = _REGISTRY.get(target.overloadpacket)
    return fn


def registered_targets() -> list[Any]:
    """All targets with a built-in converter."""
    return list(_REGISTRY)
