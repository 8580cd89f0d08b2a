"""``to_onnx``: capture -> convert -> optimize -> save."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Sequence

import onnx
import onnx_ir as ir
import torch

from .._version import __version__
from ..formats import CACHE_METADATA_KEY
from ..frozen import (
    METADATA_KEY,
    describe_frozen_inputs,
    merged_dimensions,
    narrowed_dimensions,
    size_conditions,
    size_one_assumptions,
    specialized_int_inputs,
    warn_frozen_inputs,
)
from ..optimizer.api import optimize as optimize_levels
from ..optimizer.api import resolve_level
from ..optimizer.default import (  # noqa: F401 (kept here)
    _fold_constants,
    optimize_model,
    register_orphan_constants,
)
from ..optimizer.rules.quantize import check_quantize_options
from ..patches.auto import auto_patches

# the weights are saved in one streaming pass (fx2onnx.weights.save)
from ..weights.save import (  # noqa: F401
    EXTERNAL_DATA_THRESHOLD,
    PROTOBUF_SAFE_SIZE,
    load_without_weights,
    save_model,
)
from .builder import DEFAULT_OPSET, GraphBuilder
from .capture import capture
from .capture_check import check_capture as run_check
from .capture_check import check_mode, report_capture_check
from .dispatcher import Dispatcher
from .errors import ConversionError
from .functions import convert_with_functions
from .gc_pace import fewer_collections
from .interpreter import DimNamer, Interpreter
from .naming import cache_pairs, distinct_from_inputs, leaf_paths, path_to_name
from .ort_kernels import cast_to_kernel_types, positive_reduction_axes
from .rewrite_retry import capture_rewriting_if_needed


class _Stages:
    """Prints stages with timings when verbose."""

    def __init__(self, verbose: int):
        self.verbose = verbose
        self.times: dict[str, float] = {}

    def run(self, name: str, fn, *args, **kwargs):
        begin = time.perf_counter()
        if self.verbose:
            print(f"[to_onnx] {name}...")
        result = fn(*args, **kwargs)
        self.times[name] = time.perf_counter() - begin
        if self.verbose:
            print(f"[to_onnx] {name} done in {self.times[name]:.3f}s")
        return result


def _check_options(target_opset: int, dispatcher: Any, input_names: Any, output_names: Any) -> None:
    if not isinstance(target_opset, int) or not 18 <= target_opset <= 23:
        raise ValueError(f"target_opset must be an int in [18, 23], got {target_opset!r}.")
    if dispatcher is not None and not isinstance(dispatcher, Dispatcher):
        raise TypeError(
            f"dispatcher must be a fx2onnx.Dispatcher, got {type(dispatcher).__name__}: "
            f"use fx2onnx.Dispatcher({{op: converter}})."
        )
    for label, names in (("input_names", input_names), ("output_names", output_names)):
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
            raise TypeError(f"{label} must be a list of strings, got {names!r}.")


def convert_exported_program(
    ep: torch.export.ExportedProgram,
    dim_names: dict | None = None,
    *,
    target_opset: int = DEFAULT_OPSET,
    dispatcher: Dispatcher | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    verbose: int = 0,
    export_modules_as_functions: Any = False,
    weights: dict[str, Any] | None = None,
) -> ir.Model:
    """Converts an (already functionalized) ExportedProgram into an :class:`onnx_ir.Model`.

    ``weights`` maps state_dict names to the values used instead of the program's own
    (see :func:`to_onnx`); every initializer refers to its tensor's memory, nothing is copied."""
    namer = DimNamer(dim_names)
    interpreter = Interpreter(dispatcher, namer, verbose=verbose)
    builder = GraphBuilder("main_graph", target_opset)
    env: dict[torch.fx.Node, Any] = {}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user_index = 0
    # the path of every user input in (args, kwargs), to pair a cache input with its output
    in_paths = leaf_paths(ep.call_spec.in_spec)
    n_user_inputs = sum(s.kind.name == "USER_INPUT" for s in ep.graph_signature.input_specs)
    in_paths = in_paths if len(in_paths) == n_user_inputs else []
    onnx_in_paths: dict[str, tuple] = {}
    onnx_out_paths: dict[str, tuple] = {}
    user_leaf = -1
    for spec in ep.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            tensor = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants.get(spec.target)
            tensor = weights[spec.target] if weights is not None and spec.target in weights else tensor
            if tensor is None:
                raise ConversionError(f"Cannot find the weight {spec.target!r} in the exported program.", node)
            if isinstance(tensor, torch.nn.Parameter):
                tensor = tensor.data
            env[node] = builder.add_initializer(spec.target, tensor)
        elif kind == "USER_INPUT":
            user_leaf += 1
            val = node.meta.get("val")
            if isinstance(val, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
                name = node.name
                if input_names is not None and user_index < len(input_names):
                    name = input_names[user_index]
                user_index += 1
                if in_paths:
                    onnx_in_paths[name] = in_paths[user_leaf]
                if isinstance(val, torch.Tensor):
                    value = builder.add_input(name, val.dtype, namer.shape(val))
                else:
                    dtype = torch.int64 if isinstance(val, torch.SymInt) else torch.float32 if isinstance(val, torch.SymFloat) else torch.bool
                    value = builder.add_input(name, dtype, [])
                env[node] = value
            else:
                env[node] = val  # a constant (int, float, None...) torch.export specialized
        elif kind == "TOKEN":
            # an effect token threaded through with_effects (_linalg_check_errors...): it orders
            # side effects in torch and has no ONNX meaning; TOKEN outputs are dropped below
            env[node] = None
        else:
            raise ConversionError(f"Input kind {kind} is not supported (custom objects).", node)
    if export_modules_as_functions:
        outputs = convert_with_functions(interpreter, builder, ep.graph, env, ep.graph_module, export_modules_as_functions)
    else:
        outputs = interpreter.run_nodes(builder, ep.graph, env, owner=ep.graph_module)
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    out_kinds = [s.kind.name for s in ep.graph_signature.output_specs]
    out_nodes = output_node.args[0]
    n_user = sum(kind == "USER_OUTPUT" for kind in out_kinds)
    out_paths = leaf_paths(ep.call_spec.out_spec)
    derived: list[str | None] = [path_to_name(p) for p in out_paths]
    if len(derived) != n_user:
        derived = [None] * n_user  # an unusual structure: keep the FX names
        out_paths = []
    derived = distinct_from_inputs(derived, {v.name for v in builder.inputs})
    k = 0
    user_index = -1
    for value, kind, fx_out in zip(outputs, out_kinds, out_nodes):
        if kind != "USER_OUTPUT":
            continue  # buffer / input mutations: ONNX has no state
        user_index += 1
        if value is None:
            continue
        if not isinstance(value, ir.Value):
            value = builder.constant(value)
        name = output_names[k] if output_names is not None and k < len(output_names) else derived[user_index]
        if name is None and isinstance(fx_out, torch.fx.Node):
            name = fx_out.name
        out = builder.add_output(value, name)
        if out is not value:
            out.dtype, out.shape = value.dtype, value.shape
        if out_paths:
            onnx_out_paths[out.name] = out_paths[user_index]
        k += 1
    onnx_model = builder.to_model(producer_version=_version())
    pairs = cache_pairs(onnx_in_paths, onnx_out_paths)
    if pairs:  # which output feeds which input at the next step (fx2onnx.generate reads it)
        onnx_model.metadata_props[CACHE_METADATA_KEY] = json.dumps(pairs)
    return onnx_model


def _version() -> str:
    return __version__


def _record_frozen_inputs(
    onnx_model: ir.Model, model: Any, args: Any, kwargs: Any, dynamic_shapes: Any, ep: torch.export.ExportedProgram
) -> None:
    """Writes the inputs torch.export froze into the metadata and warns about each one."""
    import json

    names = [v.name for v in onnx_model.graph.inputs]
    args, kwargs = tuple(args), dict(kwargs or {})
    frozen = describe_frozen_inputs(model, args, kwargs, dynamic_shapes, names, specialized_int_inputs(ep))
    frozen.update(narrowed_dimensions(ep, names))
    frozen.update(merged_dimensions(ep, names, model, args, kwargs, dynamic_shapes))
    frozen.update(size_conditions(ep, model, args, kwargs, dynamic_shapes))
    frozen.update(size_one_assumptions(ep, names))
    onnx_model.metadata_props[METADATA_KEY] = json.dumps(frozen)
    warn_frozen_inputs(frozen, stacklevel=4)


def to_onnx(
    model: torch.nn.Module | torch.export.ExportedProgram,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    target_opset: int | None = None,
    dispatcher: Dispatcher | None = None,
    optimize: bool | str = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    filename: str | os.PathLike | None = None,
    external_data: bool | None = None,
    verbose: int = 0,
    return_ir: bool = False,
    export_modules_as_functions: bool | set[type[torch.nn.Module]] = False,
    decompose: bool = True,
    quantize: str | None = None,
    quantize_block_size: int = 32,
    quantize_symmetric: bool = False,
    patches: bool | str = "auto",
    weights: dict[str, Any] | None = None,
    check_capture: bool | str = True,
    after_conversion: Any = None,
) -> onnx.ModelProto:
    """Exports a PyTorch model to ONNX with fx2onnx's own converter.

    The model is captured with :func:`torch.export.export` (no decompositions),
    each aten op is converted into ONNX, then the graph is cleaned up.

    An operator without a converter (neither built-in nor in ``dispatcher``) is
    replaced by torch's decomposition of it, only that operator, a few rounds
    while the decomposition brings new operators without a converter
    (``verbose`` prints which ones were decomposed). Operators with a converter
    are never decomposed: a converter given through the dispatcher always wins.
    An operator torch cannot decompose raises
    :class:`fx2onnx.UnsupportedOpError` naming it and its source line.

    :param model: a :class:`torch.nn.Module` or a :class:`torch.export.ExportedProgram`
    :param args: positional inputs (tensors, nested lists/tuples/dicts, None, scalars)
    :param kwargs: keyword inputs
    :param dynamic_shapes: as in :func:`torch.export.export`; strings name dimensions
        (``{"x": {0: "batch"}}``) and the names are kept in the ONNX model
    :param strict: strict mode of :func:`torch.export.export`
    :param target_opset: ONNX opset of the main domain (default: 20, or 23 with the
        levels ``"onnxruntime"`` and ``"opset23"`` whose attention fusion needs it)
    :param dispatcher: :class:`fx2onnx.Dispatcher` with converters for custom ops
    :param optimize: True or ``"default"``: onnxscript's optimizer (constant folding,
        dead code, identities) and shape clean-ups; ``"onnxruntime"`` or ``"opset23"``:
        fused operators too (see :func:`fx2onnx.optimize`); False: none
    :param input_names: names of the ONNX inputs (default: the FX placeholder names)
    :param output_names: names of the ONNX outputs (default: derived from the output
        structure, ``logits`` for a ModelOutput, the keys of a dict, ``output_0``...)
    :param filename: if given, saves the model there, the weights written one by one from
        their own memory (see :mod:`fx2onnx.weights`)
    :param external_data: save weights in ``<filename>.data`` (default: only when they exceed
        1.5 GB); the ModelProto returned then holds references to that file, not the weights
    :param verbose: prints the stages and their timings
    :param return_ir: return the :class:`onnx_ir.Model` instead of a ModelProto
    :param export_modules_as_functions: True (every submodule) or a set of module
        classes: each call of a selected module becomes an ONNX local function, one
        function per class and signature (the optimizer keeps them, see
        :mod:`fx2onnx.convert.functions`)
    :param decompose: decompose the operators without a converter (see above);
        False raises UnsupportedOpError for them instead
    :param quantize: ``"int4"`` or ``"int8"`` with ``optimize="onnxruntime"``: the weights of every
        MatMul / linear layer as onnxruntime's ``MatMulNBits`` (see :func:`fx2onnx.optimize`
        for the report)
    :param quantize_block_size: with ``quantize``, the values sharing one scale (a power of two >= 16)
    :param quantize_symmetric: with ``quantize``, symmetric blocks (no zero point stored, faster int4
        kernels in onnxruntime); asymmetric blocks otherwise
    :param patches: ``"auto"``: the capture runs inside
        ``fx2onnx.torch_export_patches(patch_transformers=True)`` when the model is or
        contains a transformers module (or an input is a transformers cache), with
        ``patch_timm=True`` when it contains a timm module (``patch_diffusers=True``: a diffusers one), adding only what an enclosing
        ``torch_export_patches`` does not apply already (see :mod:`fx2onnx.patches.auto`);
        True: always; False: never
    :param weights: values of the weights by state_dict name, used instead of the model's own
        (torch tensors, numpy arrays or onnx_ir tensors, such as the lazy ones of
        :func:`fx2onnx.weights.checkpoint_weights` which read a checkpoint when saving)
    :param check_capture: after torch.export, run the exported program on the example inputs and compare
        its outputs with the model's (see :mod:`fx2onnx.convert.capture_check`): True raises
        :class:`fx2onnx.CaptureMismatchError` when they differ, naming the outputs,
        the size of the difference and the first submodule the program does not reproduce; ``"warn"``
        warns instead (:class:`~fx2onnx.CaptureMismatchWarning`); False skips it.
        The check costs one eager run and one run of the program; it is skipped when a weight or an
        input is on the meta device, for an ExportedProgram and for programs drawing random numbers
    :param after_conversion: a function called with the converted :class:`onnx_ir.Model` before it is
        optimized, to change it in place (:func:`fx2onnx.weights.repeat_layers.stamp_layers` adds the
        layers a short capture left out)
    :return: the ONNX model; when it was saved with external data, the ModelProto of the
        file without the bytes of the weights (``onnx.load(filename)`` loads them when they
        fit in memory, onnxruntime and :func:`fx2onnx.validate` take the path)

    What torch.export froze, a Python scalar argument (``int``, ``float``, ``bool``,
    ``str``) or the length of a list, is written in the model's metadata
    (``fx2onnx.frozen_inputs``) and reported with a
    :class:`fx2onnx.frozen.FrozenInputWarning` (not for a ``bool`` or a ``str`` given ``None``
    in ``dynamic_shapes``, nor a scalar given ``Dim.STATIC``: the user said it is a constant);
    :func:`fx2onnx.validate` refuses other values. An ``int`` marked in ``dynamic_shapes`` (``Dim.DYNAMIC`` or a name) stays
    dynamic: it becomes an int64 scalar input (see :mod:`fx2onnx.frozen`), unless
    torch.export specializes it all the same (the code indexes with it): then it is
    recorded and reported as frozen. A cache made only of sliding-window layers is
    recorded and reported too: it is right only below its window.

    .. code-block:: python

        import torch, fx2onnx

        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        x = torch.randn(3, 4)
        onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))
        print(fx2onnx.validate(onx, model, (torch.randn(5, 4),)))
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of inputs, got {type(args).__name__}: use (x,) for one input.")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__}.")

    level = resolve_level(optimize)
    if quantize is not None:
        check_quantize_options(quantize, quantize_block_size)
        if level != "onnxruntime":
            raise ValueError(f"quantize={quantize!r} needs onnxruntime's operators: use optimize='onnxruntime', not {optimize!r}.")
    if target_opset is None:
        target_opset = 23 if level in ("onnxruntime", "opset23") else DEFAULT_OPSET
    _check_options(target_opset, dispatcher, input_names, output_names)

    check_mode(check_capture)
    stages = _Stages(verbose)

    with auto_patches(patches, model, tuple(args), dict(kwargs or {})) as applied:
        if verbose and applied:
            print(f"[to_onnx] patches applied for the capture: {', '.join(applied)}")
        ep, dim_names = capture_rewriting_if_needed(
            lambda: stages.run(
                "capture (torch.export.export)", capture, model, tuple(args), dict(kwargs or {}), dynamic_shapes,
                strict, dispatcher=dispatcher, decompose=decompose, verbose=verbose,
            ),
            model,
            patches,
        )
        # inside the patches: the caches they register flatten the inputs of the program
        # weights given apart: the model's own are placeholders (fx2onnx.weights.empty_weights), nothing to run
        if check_capture and weights is None and not isinstance(model, torch.export.ExportedProgram):
            checked = stages.run("capture check (program vs eager)", run_check, ep, model, tuple(args),
                                 dict(kwargs or {}))
            report_capture_check(checked, check_capture, stacklevel=3)
    if verbose > 1:
        print(ep.graph)
    with fewer_collections():  # the weights are released by reference counts, not by the collector
        onnx_model = stages.run(
            "conversion (FX -> ONNX)",
            convert_exported_program,
            ep,
            dim_names,
            target_opset=target_opset,
            dispatcher=dispatcher,
            input_names=input_names,
            output_names=output_names,
            verbose=verbose,
            export_modules_as_functions=export_modules_as_functions,
            weights=weights,
        )
    if after_conversion is not None:
        stages.run("after conversion", after_conversion, onnx_model)
    if level is not None:
        stages.run("optimization", optimize_levels, onnx_model, level=level, inline=not export_modules_as_functions,
                   quantize=quantize, block_size=quantize_block_size, symmetric=quantize_symmetric)
    stages.run("onnxruntime kernel types", cast_to_kernel_types, onnx_model)
    stages.run("onnxruntime reduction axes", positive_reduction_axes, onnx_model)
    if not isinstance(model, torch.export.ExportedProgram):
        _record_frozen_inputs(onnx_model, model, args, kwargs, dynamic_shapes, ep)
    external = False
    if filename is not None:
        external = stages.run("save", save_model, onnx_model, filename, external_data)
    if return_ir:
        return onnx_model
    if external:  # the weights are in the file: the graph and references to them, no second copy
        return stages.run("reload without weights", load_without_weights, filename)
    return stages.run("serialization", ir.to_proto, onnx_model)
