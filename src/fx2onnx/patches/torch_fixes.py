"""Patches of torch used while exporting with dynamic shapes.

Six patches, the first two enabled by an option of :func:`fx2onnx.torch_export_patches`:

* ``catch_constraints``: :func:`torch.export.export` raises ``Constraints
  violated`` when two dimensions the user named differently (``seq`` and
  ``total_seq``) turn out to be equal in the model. The patch turns that error
  into a warning and lets the export go on with the dimensions merged.
* ``stop_if_static``: a dimension declared dynamic that the code compares with a
  constant becomes static; torch reports it at the end of the export, far from
  the line responsible. With ``stop_if_static > 0`` the export stops at the
  exact line (``stop_if_static >= 2`` also prints the stack).
* ``layout_without_guards`` (always): torch picks the memory layout of an
  elementwise result by comparing strides and sizes. With a window view
  (``unfold``) two strides are equal and torch compares a dynamic length with the
  window size, which guards ``seq < 4`` and narrows the exported range although
  only the layout, never a value, depends on it. The patch takes that decision
  from the example sizes without recording a guard.
* ``integer_division_of_sizes`` (always): ``torch.div(seq_len, window,
  rounding_mode="trunc")`` of a symbolic size returns a 0-d tensor; the code uses
  it as a size again (``view(..., chunks, ...)``), which calls ``.item()``: the
  size becomes an unbacked symbol unrelated to ``seq_len`` and the export fails
  (``Could not guard on data-dependent expression``). With a symbolic integer among
  the operands (never in eager mode) and a division whose rounding torch.export can
  decide, the patch returns the symbolic quotient instead of the tensor; anything
  else goes to torch's ``div``.
* ``sizes_as_tensor`` (always): ``torch.as_tensor`` of a list holding symbolic sizes (the feature maps' heights
  and widths of a multi-scale deformable attention: Mask2Former's pixel decoder) makes every size a constant of the
  example in a non-strict export, silently: the graph is wrong for any other image size. With a symbolic integer in
  the list (never in eager mode) the patch builds the tensor with ``torch.tensor``, which the export traces.
* ``symbolic_linspace`` (always): ``torch.linspace`` with a symbolic number of steps (the reference points of the
  same attention) freezes that number; the patch computes the same values from ``torch.arange`` (each point from the
  nearer end, as torch's kernel does) when the steps are symbolic.

Nothing else is patched: with torch 2.13, broadcasting two tensors whose
dimensions are declared dynamic separately merges the dimensions (``Dim.DYNAMIC``)
or raises the constraint violation ``catch_constraints`` handles (named ``Dim``).
"""

from __future__ import annotations

import traceback
import warnings
from typing import Any

from .registry import Patch


class DynamicDimensionBecameStatic(AssertionError):
    """Raised by the ``stop_if_static`` patch when a dynamic dimension is specialized."""


def _make_catch_constraints(original: Any) -> Any:
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    def produce_guards_and_solve_constraints(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except ConstraintViolationError as e:
            warnings.warn(
                f"fx2onnx.torch_export_patches(catch_constraints=True) ignored a constraint "
                f"violation, the export goes on with the dimensions merged: {e}",
                UserWarning,
                stacklevel=2,
            )
            return None

    produce_guards_and_solve_constraints.__wrapped__ = original  # type: ignore[attr-defined]
    return produce_guards_and_solve_constraints


def _user_location() -> str:
    """The innermost frame outside torch, sympy and this package: the line responsible."""
    import os
    import sys

    torch_dir = os.path.dirname(os.path.abspath(_torch_file()))
    here = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not (
            filename.startswith(torch_dir)
            or filename.startswith(here)
            or os.sep + "sympy" + os.sep in filename
            or filename.endswith("contextlib.py")
        ):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown>"


def _torch_file() -> str:
    import torch

    return torch.__file__


def _make_stop_if_static(level: int) -> Any:
    def make(original: Any) -> Any:
        import sympy

        def _set_replacement(self: Any, a: Any, tgt: Any, msg: str) -> None:
            if isinstance(tgt, sympy.Integer) and a in getattr(self, "var_to_sources", {}):
                sources = [
                    s.name() if callable(s.name) else str(s.name) for s in self.var_to_sources.get(a, [])
                ]
                if sources:
                    summary = _user_location()
                    message = (
                        f"Dimension {a} of {', '.join(sources)} was declared dynamic but the model "
                        f"makes it static (= {tgt}) at {summary}. Rewrite that line with torch._check or "
                        f"torch.cond, or declare the dimension static (stop_if_static={level})."
                    )
                    if level >= 2:
                        print(message)
                        traceback.print_stack()
                    raise DynamicDimensionBecameStatic(message)
            return original(self, a, tgt, msg)

        _set_replacement.__wrapped__ = original  # type: ignore[attr-defined]
        return _set_replacement

    return make


def _make_layout_without_guards(original: Any) -> Any:
    def compute_elementwise_output_logical_to_physical_perm(*tensors: Any, **kwargs: Any) -> Any:
        shape_env = _shape_env_of(tensors)
        if shape_env is None:
            return original(*tensors, **kwargs)
        with shape_env.suppress_guards():
            return original(*tensors, **kwargs)

    compute_elementwise_output_logical_to_physical_perm.__wrapped__ = original  # type: ignore[attr-defined]
    return compute_elementwise_output_logical_to_physical_perm


def _shape_env_of(tensors: tuple[Any, ...]) -> Any:
    """The shape environment of the fake tensors' mode (None outside a symbolic trace)."""
    from torch._guards import detect_fake_mode

    return getattr(detect_fake_mode(tensors), "shape_env", None)


def _make_integer_division_of_sizes(original: Any) -> Any:
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    def div(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 2 and set(kwargs) == {"rounding_mode"} and kwargs["rounding_mode"] in ("trunc", "floor"):
            a, b = args
            integers = all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in (a, b))
            if integers and any(isinstance(v, torch.SymInt) for v in (a, b)) and statically_known_true(b > 0):
                # trunc and floor agree on a non-negative numerator
                if kwargs["rounding_mode"] == "floor" or statically_known_true(a >= 0):
                    return a // b
        return original(*args, **kwargs)

    div.__wrapped__ = original  # type: ignore[attr-defined]
    return div


def _holds_symbolic_int(data: Any) -> bool:
    import torch

    if isinstance(data, (list, tuple)):
        return any(_holds_symbolic_int(d) for d in data)
    return isinstance(data, torch.SymInt)


def _make_sizes_as_tensor(original: Any) -> Any:
    import torch

    def as_tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, (list, tuple)) and _holds_symbolic_int(data):
            dtype = args[0] if args else kwargs.get("dtype")
            return torch.tensor(data, dtype=dtype, device=kwargs.get("device"))
        return original(data, *args, **kwargs)

    as_tensor.__wrapped__ = original  # type: ignore[attr-defined]
    return as_tensor


def _make_symbolic_linspace(original: Any) -> Any:
    import torch

    def linspace(start: Any, end: Any, steps: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(steps, torch.SymInt) or args or isinstance(start, torch.Tensor) or \
                isinstance(end, torch.Tensor):
            return original(start, end, steps, *args, **kwargs)
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        index = torch.arange(steps, dtype=dtype, device=kwargs.get("device"))
        step = (end - start) / torch.sym_max(steps - 1, 1)
        return torch.where(index < steps // 2, start + index * step, end - (steps - 1 - index) * step)

    linspace.__wrapped__ = original  # type: ignore[attr-defined]
    return linspace


def torch_patches(*, catch_constraints: bool = True, stop_if_static: int = 0) -> list[Patch]:
    """Returns the torch patches for the given options."""
    patches = [
        Patch(
            name="layout_without_guards",
            kind="torch",
            target="torch._prims_common.compute_elementwise_output_logical_to_physical_perm",
            make=_make_layout_without_guards,
            expected_args=("tensors", "_skip_checks", "ambiguity_check"),
            doc="chooses an elementwise result's memory layout without narrowing a dynamic dimension",
        ),
        Patch(
            name="integer_division_of_sizes",
            kind="torch",
            target="torch.div",
            make=_make_integer_division_of_sizes,
            doc="torch.div of a symbolic size by an integer stays a symbolic integer, not a tensor whose "
            ".item() loses its relation to the size",
        ),
        Patch(
            name="sizes_as_tensor",
            kind="torch",
            target="torch.as_tensor",
            make=_make_sizes_as_tensor,
            doc="torch.as_tensor of symbolic sizes traced as torch.tensor instead of frozen to the example's",
        ),
        Patch(
            name="symbolic_linspace",
            kind="torch",
            target="torch.linspace",
            make=_make_symbolic_linspace,
            doc="torch.linspace with a symbolic number of steps computed from arange instead of frozen",
        ),
    ]
    if catch_constraints:
        patches.append(
            Patch(
                name="catch_constraints",
                kind="torch",
                target="torch.export._trace.produce_guards_and_solve_constraints",
                make=_make_catch_constraints,
                expected_args=(
                    "fake_mode",
                    "gm",
                    "dynamic_shapes",
                    "equalities_inputs",
                    "original_signature",
                ),
                doc="turns 'Constraints violated' between named dimensions into a warning",
            )
        )
    if stop_if_static:
        patches.append(
            Patch(
                name="stop_if_static",
                kind="torch",
                target="torch.fx.experimental.symbolic_shapes.ShapeEnv._set_replacement",
                make=_make_stop_if_static(stop_if_static),
                expected_args=("self", "a", "tgt", "msg"),
                doc="raises at the line where a dynamic dimension becomes a constant",
            )
        )
    return patches
