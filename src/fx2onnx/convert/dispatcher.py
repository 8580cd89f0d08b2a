"""User-provided converters for custom ops (and any op to override).

.. code-block:: python

    import fx2onnx

    def convert_myop(ctx, node, x):
        return ctx.op.Relu(x)

    dispatcher = fx2onnx.Dispatcher({"mylib::myop": convert_myop})
    # onx = fx2onnx.to_onnx(model, (x,), dispatcher=dispatcher)

A converter receives ``(ctx, node, *args, **kwargs)`` where tensors are
:class:`onnx_ir.Value` and returns the output value(s); see
:class:`fx2onnx.convert.context.ConversionContext` for the helpers. An
:epkg:`onnxscript` function (``@onnxscript.script()``) is accepted too: it is
called with the tensor arguments and added as a local function.

An op declared with ``mutates_args`` (modifying a tensor in place) reaches the
converter through its functional form (``auto_functionalized_v2``): the
converter receives the arguments as usual and returns the op's outputs followed
by the new value of every mutated argument, in the order of the schema.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import target_name


def _key(target: Any) -> str:
    """Normalizes an op overload, packet or string into ``namespace::name[.overload]``."""
    if isinstance(target, str):
        return target.replace(".default", "")
    return target_name(target).replace(".default", "")


class Dispatcher:
    """Maps operators to user converters; looked up before the built-in converters.

    Keys may be an OpOverload (``torch.ops.mylib.myop.default``), an
    OpOverloadPacket (``torch.ops.mylib.myop``, all overloads) or a string
    (``"mylib::myop"`` or ``"mylib::myop.overload"``).
    """

    def __init__(self, converters: Mapping[Any, Callable[..., Any]] | None = None):
        self._by_key: dict[str, Callable[..., Any]] = {}
        for target, fn in (converters or {}).items():
            self.register(target, fn)

    def register(self, target: Any, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as the converter of ``target`` (an OpOverload, an OpOverloadPacket or a
        string), replacing any previous one; an onnxscript function is wrapped to be called like
        a converter.
        """
        if not callable(fn):
            raise TypeError(f"The converter for {target!r} must be callable, got {type(fn).__name__}.")
        self._by_key[_key(target)] = _wrap_onnxscript(fn)

    def find(self, target: Any) -> Callable[..., Any] | None:
        """The converter of ``target``: the one registered for this overload, else the one
        registered for every overload of the operator, else None.
        """
        key = _key(target)
        if key in self._by_key:
            return self._by_key[key]
        base = key.split(".")[0]
        return self._by_key.get(base)

    def __contains__(self, target: Any) -> bool:
        return self.find(target) is not None

    def __repr__(self) -> str:
        return f"Dispatcher({sorted(self._by_key)})"


def _wrap_onnxscript(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turns an onnxscript function into a converter; returns other callables as they are."""
    try:
        from onnxscript.values import OnnxFunction
    except ImportError:  # pragma: no cover
        return fn
    if not isinstance(fn, OnnxFunction):
        return fn

    def convert_with_onnxscript(ctx, node, *args, **kwargs):
        return ctx.call_onnxscript(fn, *args, **kwargs)

    convert_with_onnxscript.__name__ = f"onnxscript_{fn.name}"
    return convert_with_onnxscript
