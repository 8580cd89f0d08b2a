"""What a scenario is: a module, several input sets and its dynamic shapes.

A zoo case is a small :class:`torch.nn.Module` whose class body declares:

* ``_inputs``: a list of at least two input sets ``(args, kwargs)`` of different
  shapes, built with :func:`I` and :func:`T`,
* ``_dynamic``: the dynamic shapes, written with strings naming the dimensions
  (``({0: "batch"},)``), as :func:`fx2onnx.to_onnx` takes them,
* ``_atol`` (optional): the tolerance of the comparison with eager (1e-4),
* ``_converters`` / ``_translations`` (optional): converters of custom ops for
  :class:`fx2onnx.Dispatcher` (``custom`` exporters) and for the
  ``custom_translation_table`` of :func:`torch.onnx.export` (``dynamo``).

:func:`Case.from_class` turns such a class into a :class:`Case`.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import textwrap
from typing import Any, Callable

import torch

from ..zoo import export_dynamic_shapes

_GENERATOR = torch.Generator().manual_seed(0)


def T(*shape: int, dtype: torch.dtype = torch.float32, low: int = 0, high: int = 5) -> torch.Tensor:
    """A seeded random tensor: normal for floats, ``[low, high)`` for integers, coin flips for bool."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=_GENERATOR) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=_GENERATOR, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=_GENERATOR).to(dtype)
    return torch.randint(low, high, shape, generator=_GENERATOR, dtype=dtype)


def I(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """One input set: ``I(x, y, scale=2.0)`` is ``((x, y), {"scale": 2.0})``."""
    return args, kwargs


@dataclasses.dataclass
class Case:
    """A scenario: how to build the model, its input sets, dynamic shapes and tolerance."""

    name: str
    family: str
    doc: str
    code: str
    make_model: Callable[[], torch.nn.Module]
    inputs: list[tuple[tuple, dict]]
    dynamic_shapes: Any = None
    atol: float = 1e-4
    has_dynamic: bool = True
    #: converters for fx2onnx.Dispatcher (custom ops), used by the ``custom`` exporters
    converters: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    #: ``custom_translation_table`` of torch.onnx.export, used by the ``dynamo`` exporter
    translations: dict[Any, Callable[..., Any]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_class(cls, module_class: type, family: str) -> "Case":
        """Builds a case from a zoo class (see the module docstring)."""
        inputs = getattr(module_class, "_inputs", None)
        if not inputs or len(inputs) < 2:
            raise ValueError(f"{module_class.__name__} must define _inputs with at least two input sets.")
        if not module_class.__doc__:
            raise ValueError(f"{module_class.__name__} must have a docstring saying what it exercises.")
        dynamic = getattr(module_class, "_dynamic", None)

        def make_model() -> torch.nn.Module:
            torch.manual_seed(0)
            return module_class().eval()

        return cls(
            name=module_class.__name__,
            family=family,
            doc=inspect.cleandoc(module_class.__doc__),
            code=textwrap.dedent(inspect.getsource(module_class)),
            make_model=make_model,
            inputs=list(inputs),
            dynamic_shapes=dynamic,
            atol=getattr(module_class, "_atol", 1e-4),
            has_dynamic=dynamic is not None,
            converters=dict(getattr(module_class, "_converters", {})),
            translations=dict(getattr(module_class, "_translations", {})),
        )

    def input_set(self, index: int) -> tuple[tuple, dict]:
        """A deep copy of input set ``index`` (models may modify their inputs in place)."""
        args, kwargs = self.inputs[index]
        return copy.deepcopy(tuple(args)), copy.deepcopy(dict(kwargs))

    def torch_dynamic_shapes(self) -> Any:
        """The dynamic shapes with each string replaced by ``torch.export.Dim.DYNAMIC``."""
        return export_dynamic_shapes(self.dynamic_shapes)


def collect_cases(module: Any, family: str) -> list[Case]:
    """The cases defined in a module: its nn.Module classes with ``_inputs``, in source order."""
    classes = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and "_inputs" in vars(v)
        and v.__module__ == module.__name__
    ]
    classes.sort(key=lambda c: inspect.getsourcelines(c)[1])
    return [Case.from_class(c, family) for c in classes]
