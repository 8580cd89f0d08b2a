"""The check of the capture: the exported program against eager, on the example inputs.

torch.export may return a program that computes something else than the model: a branch
transformers takes only in eager mode, a value read during tracing, a mask skipped at run time
(PaliGemma: :mod:`fx2onnx.patches.sdpa_skip`). fx2onnx converts such a program faithfully,
so the ONNX model is wrong and nothing says so. :func:`check_capture` runs the program
(``ep.module()``) and the model on copies of the example inputs and compares every output.
When they differ it names the outputs and the size of the difference and points at the first
submodule whose outputs the program does not reproduce (the program's nodes carry the module
they come from, ``nn_module_stack``; the eager outputs are recorded with forward hooks).

When the check cannot run, it never stops a right export: eager raising on the example inputs, the
program raising (a runtime assertion torch.export added, such as ``u4 >= 2`` after a data-dependent
``scan``, a kernel failing with an error) or outputs that cannot be compared end the check with one
:class:`CaptureNotCheckedWarning` saying what was not checked and why, and :func:`check_capture` returns
``None``: the export goes on to the usual validation. (A kernel killing the process cannot be caught
in it.)

Skipped (``None`` returned, nothing run) when the weights are not real (a parameter, a buffer or
an input on the ``meta`` device), when the model is already an ExportedProgram, and when the
program draws random numbers (dropout in training mode, ``torch.rand``...): two runs differ anyway.
Buffers the program mutates are restored after each run: the check leaves the model as it found it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from typing import Any, Iterator, Sequence

import torch
from torch.utils import _pytree as pytree

from ..validation import cache_flattening, flatten_outputs
from .capture import without_views
from .errors import ExportError

#: (atol, rtol) by dtype; the program runs the same kernels as eager, decompositions aside
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2)}
DEFAULT_TOLERANCE = (1e-4, 1e-3)
#: the values of ``to_onnx(check_capture=...)``
MODES = (True, False, "warn")


class CaptureMismatchError(ExportError):
    """torch.export returned a program whose outputs differ from the model's on the example inputs."""


class CaptureMismatchWarning(UserWarning):
    """Like :class:`CaptureMismatchError`, with ``to_onnx(check_capture="warn")``."""


class CaptureNotCheckedWarning(UserWarning):
    """The check could not run (eager or the program raised on the example inputs, a kernel failed): the
    export goes on unchecked by it, to the usual validation."""


def _not_checked(why: str, error: BaseException, stacklevel: int = 4) -> None:
    """One warning: what could not be checked and why; the export goes on."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
    warnings.warn(f"the capture was not checked against eager: {why} ({type(error).__name__}: {reason[:300]}); "
                  "the export goes on, validate the ONNX model against eager (check_capture=False skips this check).",
                  CaptureNotCheckedWarning, stacklevel=stacklevel)


@dataclasses.dataclass
class CaptureCheck:
    """What :func:`check_capture` found: one entry per output, the first diverging submodule."""

    outputs: list[dict[str, Any]]
    divergence: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(o["ok"] for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max((o["abs"] for o in self.outputs), default=0.0)

    def message(self) -> str:
        wrong = [o for o in self.outputs if not o["ok"]]
        lines = [
            f"torch.export returned a program which differs from the model on the example inputs: "
            f"{len(wrong)} of {len(self.outputs)} output(s) differ, max abs diff {self.max_abs:.3g}.",
        ]
        for o in wrong[:8]:
            lines.append(f"  {o['name']}: {o['reason']}")
        if self.divergence:
            d = self.divergence
            lines.append(
                f"The first submodule whose outputs the program does not reproduce: {d['path'] or '<the model>'!r} "
                f"({d['class']}), max abs diff {d['abs']:.3g} on its output {d['output']} of shape {d['shape']}."
            )
        lines.append(
            "The ONNX model would hold the same wrong computation: the model takes a path under torch.export "
            "it does not take in eager mode (a branch on is_tracing/is_exporting, a value read during tracing, "
            "a mask skipped at run time). Fix the model or add a patch (fx2onnx.torch_export_patches); "
            "check_capture='warn' exports anyway with a warning, check_capture=False skips the check."
        )
        return "\n".join(lines)


def why_skipped(model: Any, args: Sequence[Any], kwargs: dict[str, Any], ep: torch.export.ExportedProgram) -> str | None:
    """Why the capture cannot be checked, None when it can."""
    if not isinstance(model, torch.nn.Module):
        return "the model is not a torch.nn.Module"
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.device.type == "meta":
            return f"the weight {name!r} is on the meta device"
    if any(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in pytree.tree_leaves((args, kwargs))):
        return "an input is on the meta device"
    for node in ep.graph.nodes:
        if _draws_random_numbers(node):
            return f"the program draws random numbers ({node.target})"
    return None


#: the arguments deciding whether an op tagged nondeterministic_seeded draws anything (dropout in
#: evaluation mode, scaled_dot_product_attention without dropout do not)
RANDOM_SWITCHES = ("train", "dropout_p", "dropout")


def _draws_random_numbers(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    schema = target._schema.arguments
    values = {a.name: (node.args[i] if i < len(node.args) else node.kwargs.get(a.name, a.default_value))
              for i, a in enumerate(schema)}
    switches = [values[name] for name in RANDOM_SWITCHES if name in values]
    if not switches:
        return True
    return any(not isinstance(v, (bool, int, float)) or bool(v) for v in switches if v is not None)


def _tolerance(tensor: torch.Tensor) -> tuple[float, float]:
    return TOLERANCES.get(tensor.dtype, DEFAULT_TOLERANCE)


def _leaves_with_names(outputs: Any) -> list[tuple[str, Any]]:
    with cache_flattening(outputs):
        leaves, _ = pytree.tree_flatten_with_path(outputs)
    return [(pytree.keystr(path) or "output", leaf) for path, leaf in leaves
            if isinstance(leaf, (torch.Tensor, int, float, bool))]


def compare(expected: Any, got: Any) -> list[dict[str, Any]]:
    """One entry per output of ``expected`` (eager), compared with the same output of ``got``."""
    exp = _leaves_with_names(expected)
    named = _leaves_with_names(got)
    out = [leaf for _, leaf in named]
    if len(exp) != len(out):
        return [dict(name="outputs", ok=False, abs=float("inf"),
                     reason=f"eager returns {len(exp)} values {[n for n, _ in exp]}, the program {len(out)} "
                     f"{[n for n, _ in named]}")]
    entries = []
    for (name, e), g in zip(exp, out):
        e = torch.as_tensor(e)
        g = torch.as_tensor(g)
        entry: dict[str, Any] = dict(name=name, ok=True, abs=0.0, reason="")
        if tuple(e.shape) != tuple(g.shape):
            entry.update(ok=False, abs=float("inf"), reason=f"shape {tuple(g.shape)} instead of {tuple(e.shape)}")
        elif e.numel() and (e.dtype.is_floating_point or e.is_complex()):
            ef, gf = e.detach().to(torch.complex128 if e.is_complex() else torch.float64), \
                g.detach().to(torch.complex128 if e.is_complex() else torch.float64)
            same = (ef == gf) | (torch.isnan(ef) & torch.isnan(gf))
            diff = torch.where(same, torch.zeros((), dtype=torch.float64), (ef - gf).abs().to(torch.float64))
            diff = torch.nan_to_num(diff, nan=float("inf"))
            atol, rtol = _tolerance(e)
            entry["abs"] = float(diff.max())
            if not bool((diff <= atol + rtol * torch.nan_to_num(ef.abs().to(torch.float64))).all()):
                entry.update(ok=False, reason=f"max abs diff {entry['abs']:.3g} (atol={atol}, rtol={rtol})")
        elif e.numel() and not torch.equal(e, g.to(e.dtype)):
            entry.update(ok=False, abs=float((e.double() - g.double()).abs().max()), reason="different values")
        entries.append(entry)
    return entries


class _MutatedBuffers:
    """Saves the buffers the program mutates (BatchNorm's statistics, a step counter) and restores them."""

    def __init__(self, model: torch.nn.Module, ep: torch.export.ExportedProgram):
        names = set(ep.graph_signature.buffers_to_mutate.values())
        buffers = dict(model.named_buffers())
        self.saved = {n: (buffers[n], buffers[n].detach().clone()) for n in names if n in buffers}

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, value in self.saved.values():
                tensor.copy_(value)


@contextlib.contextmanager
def _modules_flattened(inputs: Any) -> Iterator[None]:
    """Modules given as inputs flatten into their parameters and buffers, as during a non-strict
    capture (torch registers their classes as pytree nodes for the capture only)."""
    from torch._export.utils import deregister_module_as_pytree_input_node, register_module_as_pytree_input_node

    classes = {type(leaf) for leaf in pytree.tree_leaves(inputs) if isinstance(leaf, torch.nn.Module)}
    added = [c for c in classes if c not in pytree.SUPPORTED_NODES]
    for cls in added:
        register_module_as_pytree_input_node(cls)
    try:
        yield
    finally:
        for cls in added:
            deregister_module_as_pytree_input_node(cls)


def run_program(ep: torch.export.ExportedProgram, args: tuple, kwargs: dict) -> Any:
    """The program's outputs on ``(args, kwargs)``, structured like the model's.

    The lifted graph runs directly (weights, buffers and constants first, then the flattened inputs):
    ``ep.module()`` unlifts and generates code again, about half the check's time on a tiny decoder.
    Programs with effect tokens go through ``ep.module()`` (without torch.export's guards: assumptions on
    the example's sizes and strides, which the example fulfils)."""
    from torch.export.graph_signature import OutputKind

    placeholders = [n for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
    flat = ep._graph_module_flat_inputs(args, kwargs)
    if len(flat) != len(placeholders):
        return ep.module(check_guards=False)(*args, **kwargs)
    results = ep.graph_module(*flat)
    user = [r for r, spec in zip(results, ep.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    return pytree.tree_unflatten(user, ep.call_spec.out_spec)


def check_capture(
    ep: torch.export.ExportedProgram, model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
    locate: bool = True,
) -> CaptureCheck | None:
    """Runs the model and the exported program on copies of the inputs and compares the outputs.

    :return: the comparison, or None when the check does not apply (see :func:`why_skipped`)
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    if why_skipped(model, args, kwargs, ep) is not None:
        return None

    mutated = _MutatedBuffers(model, ep)
    # the program gets the inputs the capture got (views copied)
    args, kwargs = without_views(args, kwargs)
    try:
        with torch.no_grad():
            try:
                expected = model(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            except Exception as e:  # noqa: BLE001 - eager cannot run (a kernel missing on this device/dtype)
                _not_checked("the model raised in eager mode on the example inputs", e)
                return None
            mutated.restore()
            try:
                with cache_flattening((args, kwargs)), _modules_flattened((args, kwargs)):
                    got = run_program(ep, copy.deepcopy(args), copy.deepcopy(kwargs))
            except Exception as e:  # noqa: BLE001 - a runtime assertion of torch.export, a kernel's error
                _not_checked("the captured program raised on the example inputs (a runtime assertion torch.export "
                             "added, or one of its kernels failed)", e)
                return None
    finally:
        mutated.restore()
    try:
        result = CaptureCheck(compare(expected, got))
    except Exception as e:  # noqa: BLE001 - outputs the comparison cannot read
        _not_checked("the outputs of eager and of the program could not be compared", e)
        return None
    if not result.ok and locate:
        try:
            result.divergence = first_divergence(model, ep.module(check_guards=False), args, kwargs)
        except Exception:  # noqa: BLE001 - the location is a hint, the mismatch is the error
            result.divergence = None
        finally:
            mutated.restore()
    return result


def _record_eager(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, str, list[torch.Tensor]]]:
    """The floating-point tensors each submodule returns at its first call, in the order the calls end."""

    done: list[tuple[str, str, list[torch.Tensor]]] = []
    seen: set[str] = set()
    handles = []

    def hook(path: str):
        def record(module: torch.nn.Module, _args: Any, output: Any) -> None:
            if path in seen:
                return
            seen.add(path)
            tensors = [t.detach().clone() for t in flatten_outputs(output) if t.is_floating_point()]
            done.append((path, type(module).__name__, tensors))

        return record

    for path, sub in model.named_modules():
        handles.append(sub.register_forward_hook(hook(path)))
    try:
        with torch.no_grad():
            model(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    finally:
        for h in handles:
            h.remove()
    return done


def _paths(node: torch.fx.Node) -> set[str]:
    return {path for path, _ in (node.meta.get("nn_module_stack") or {}).values()}


def _record_program(module: torch.fx.GraphModule, args: tuple, kwargs: dict) -> dict[str, list[torch.Tensor]]:
    """The floating-point tensors leaving each submodule in the program: the values of the nodes of its
    ``nn_module_stack`` which a node outside it (or the output) uses."""
    from torch.fx import _pytree as fx_pytree

    leaving: dict[torch.fx.Node, set[str]] = {}
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        inside = _paths(node)
        for user in node.users:
            outside = inside - (_paths(user) if user.op == "call_function" else set())
            if outside:
                leaving.setdefault(node, set()).update(outside)
    by_path: dict[str, list[torch.Tensor]] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            value = super().run_node(node)
            if node in leaving and isinstance(value, torch.Tensor) and value.is_floating_point():
                for path in leaving[node]:
                    by_path.setdefault(path, []).append(value.detach())
            return value

    with cache_flattening((args, kwargs)):
        flat = fx_pytree.tree_flatten_spec((list(copy.deepcopy(args)), copy.deepcopy(kwargs)), module._in_spec)
    with torch.no_grad():
        Recorder(module).run(*flat, enable_io_processing=False)
    return by_path


def first_divergence(model: torch.nn.Module, module: torch.fx.GraphModule, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """The first submodule (in the order the calls end) one of whose outputs no value leaving that submodule
    in the program reproduces, with the smallest difference among the values of the same shape."""
    eager = _record_eager(model, args, kwargs)
    program = _record_program(module, args, kwargs)
    for path, class_name, outputs in eager:
        candidates = program.get(path, [])
        for k, out in enumerate(outputs):
            same_shape = [c for c in candidates if c.shape == out.shape and c.dtype == out.dtype]
            if not same_shape:
                continue  # the program has no such value in this module (a view, an input passed through)
            atol, rtol = _tolerance(out)
            diffs = [float((c.double() - out.double()).abs().max()) for c in same_shape]
            if not any(torch.allclose(c, out, atol=atol, rtol=rtol, equal_nan=True) for c in same_shape):
                return dict(path=path, **{"class": class_name}, output=k, shape=tuple(out.shape), abs=min(diffs))
    return None


def report_capture_check(result: CaptureCheck | None, mode: bool | str, stacklevel: int = 3) -> None:
    """Raises :class:`CaptureMismatchError` (``mode`` True) or warns (``"warn"``) when the check failed."""
    if result is None or result.ok or not mode:
        return
    if mode == "warn":
        warnings.warn(result.message(), CaptureMismatchWarning, stacklevel=stacklevel)
        return
    raise CaptureMismatchError(result.message())


def check_mode(mode: Any) -> None:
    """Refuses a ``check_capture`` value other than True, False or ``"warn"``."""
    if not any(mode is m if isinstance(m, bool) else mode == m for m in MODES):
        raise ValueError(f"check_capture must be True (raise), 'warn' or False (no check), got {mode!r}.")
