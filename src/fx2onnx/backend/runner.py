"""One FX graph converted into ONNX and run with onnxruntime, sessions cached per input signature."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np
import onnx_ir as ir
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..convert.api import optimize_model
from ..convert.builder import DEFAULT_OPSET
from ..convert.graph_module import convert_graph_module, storage_permutation
from ..optimizer.api import optimize
from ..validation import _as_pair, run_session, to_numpy
from .dump import dump_targets, save_dump
from .fallback import Fallback, report_fallback
from .training_ops import backend_dispatcher

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclasses.dataclass
class BackendOptions:
    """Options of :func:`fx2onnx.backend.make_onnxruntime_backend`."""

    #: keep the symbolic dimensions dynamo gives in the ONNX models (one session per input ranks)
    dynamic: bool = False
    #: onnxruntime execution providers
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    #: where every ONNX model is saved with the FX graph it comes from (nowhere when None)
    dump_folder: str | None = None
    #: prints the graphs being converted
    verbose: int = 0
    #: runs a graph eagerly when it cannot be converted or run on onnxruntime, instead of raising
    fallback: bool = False
    #: ONNX opset of the converted graphs
    target_opset: int = DEFAULT_OPSET
    #: user converters, a :class:`fx2onnx.Dispatcher`
    dispatcher: Any = None
    #: ``True`` runs onnxscript's optimizer on every model, a level name of :func:`fx2onnx.optimize` runs that
    #: level
    optimize: bool | str = False
    #: an operator without converter is decomposed with torch's core aten decompositions
    decompose: bool = True
    #: onnxruntime's ``intra_op_num_threads`` (onnxruntime's default when None)
    threads: int | None = None


@dataclasses.dataclass
class _CachedSession:
    session: Any
    model: ir.Model
    feeds: list[tuple[str, int]]  # (ONNX input name, placeholder index)
    output_layout: list[tuple[str, Any]]
    bfloat16: bool = False  # onnxruntime's numpy bridge knows no bfloat16: OrtValues then
    perms: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # fed as x.permute(perm)


def _expected_output(output: Any) -> Any:
    """(rank, dtype) of a graph output tensor, a Python type for a symbolic scalar, None if unknown."""
    val = output.meta.get("val") if isinstance(output, torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        return val.dim(), val.dtype
    if isinstance(val, (torch.SymBool, bool)):
        return bool
    if isinstance(val, (torch.SymInt, int)):
        return int
    if isinstance(val, (torch.SymFloat, float)):
        return float
    return None


def _ort_to_torch(array: np.ndarray) -> torch.Tensor:
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    if not array.flags.c_contiguous:
        array = array.copy()  # np.ascontiguousarray would turn a 0-d array into a 1-d one
    return torch.from_numpy(array)


def _apply_view(target: Any, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    """One view of an output (see ``view_outputs`` in :func:`fx2onnx.convert.graph_module.convert_graph_module`);
    a reshape where an input's strides do not allow a view (a copy, as onnxruntime would make)."""
    try:
        return target(t, *args, **kwargs)
    except RuntimeError:
        if target not in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            raise
        return torch.ops.aten.reshape.default(t, *args, **kwargs)


class GraphRunner:
    """Runs one graph handed by dynamo or aot_autograd on onnxruntime.

    The graph is converted once when the runner is created, so that an
    unsupported operator is reported at compile time. A session is created per
    input signature: dtypes and shapes (ranks if ``dynamic``) of the tensors,
    values of the Python scalars. With ``dynamic=False`` each signature gets a
    model with static shapes; with ``dynamic=True`` the model keeps the symbolic
    dimensions dynamo gave.

    :param gm: an FX graph of aten operators
    :param example_inputs: one example per placeholder (fake tensors, SymInt...)
    :param name: name of the graph (``g0_forward``...), used in dumps and messages
    :param options: backend options
    :param fallbacks: where a fallback at run time is recorded (``fallback=True``, see
        :mod:`fx2onnx.backend.fallback`): onnxruntime refuses the model of a new
        signature, or running it fails; the graph then runs eagerly
    """

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        name: str,
        options: BackendOptions,
        fallbacks: list[Fallback] | None = None,
    ):
        self._boxed_call = True  # aot_autograd gives the arguments as one list (copied by wrappers)
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.name = name
        self.options = options
        self.sessions: dict[tuple, _CachedSession] = {}
        self.n_calls = 0
        self.cache_hits = 0
        self.conversion_time = 0.0
        self.files: list[str] = []
        #: set when the graph fell back to eager execution at run time (``fallback=True``)
        self.fallback: Fallback | None = None
        self._fallback_records = fallbacks if fallbacks is not None else []
        self._stage = "conversion"
        output_node = next(n for n in gm.graph.nodes if n.op == "output")
        fx_outputs = output_node.args[0] if isinstance(output_node.args[0], (list, tuple)) else [output_node.args[0]]
        self._expected = [_expected_output(o) for o in fx_outputs]
        # converted now: an unsupported op fails at compile time
        self.model = self._convert(self.example_inputs, static_shapes=False)
        self._example_key = self._static_key(self.example_inputs)

    def __repr__(self) -> str:
        return f"GraphRunner({self.name!r}, sessions={len(self.sessions)}, calls={self.n_calls}, hits={self.cache_hits})"

    @property
    def node_count(self) -> int:
        """Number of ONNX nodes of the model converted at compile time."""
        return len(self.model.graph)

    def _static_key(self, inputs: Sequence[Any]) -> tuple | None:
        """The signature of the compile-time examples, None if a shape is symbolic and dynamic is False."""
        if not self.options.dynamic and any(
            isinstance(x, _SYMBOLIC) or (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
            for x in inputs
        ):
            return None
        return self.signature(inputs)

    def _convert(self, inputs: Sequence[Any], static_shapes: bool) -> ir.Model:
        begin = time.perf_counter()
        # aot_autograd calls its compilers with its FakeTensorMode active; the graph's
        # constants (get_attr, such as an empty cache's tensor) are real tensors which
        # become initializers, read again by the optimizer: both run outside that mode
        with unset_fake_temporarily():
            model = convert_graph_module(
                self.gm,
                inputs,
                static_shapes=static_shapes,
                target_opset=self.options.target_opset,
                dispatcher=backend_dispatcher(self.options.dispatcher),
                verbose=max(self.options.verbose - 1, 0),
                view_outputs=True,  # the views aot_autograd saves for backward are torch views, not copies
                permuted_inputs=True,  # the transposed weights saved for backward are fed as stored, not copied
            )
            # onnxruntime runs a node nobody reads (a converter may leave some, such as the
            # nll_loss_backward replaced by the cross entropy's gradient)
            from onnx_ir.passes.common import RemoveUnusedNodesPass

            RemoveUnusedNodesPass()(model)
            if self.options.optimize in (True, "default"):
                optimize_model(model)
            elif self.options.optimize:
                optimize(model, level=self.options.optimize)
        self.conversion_time += time.perf_counter() - begin
        if self.options.verbose:
            print(f"[fx2onnx.backend] {self.name}: {len(self.gm.graph.nodes)} FX nodes -> {len(model.graph)} ONNX nodes")
        return model

    def signature(self, args: Sequence[Any]) -> tuple:
        """The cache key of a call: dtype, shape and layout (rank if dynamic) of tensors, values of constants."""
        key: list[Any] = []
        for i, x in enumerate(args):
            if isinstance(x, torch.Tensor):
                if self.options.dynamic:
                    key.append(("T", x.dtype, x.dim()))
                else:
                    # the layout too: a tensor stored transposed is fed as stored (permuted_inputs), and
                    # the compile-time example may say otherwise (a forward output saved for backward is
                    # contiguous on onnxruntime, transposed in torch's fake value)
                    key.append(("T", x.dtype, tuple(int(d) for d in x.shape), None if x.is_contiguous() else storage_permutation(x)))
            elif self.options.dynamic and isinstance(self.example_inputs[i], _SYMBOLIC):
                key.append(("S",))  # a symbolic scalar stays an input of the model
            else:
                key.append(("C", type(x).__name__, x))
        return tuple(key)

    def _session_for(self, args: Sequence[Any]) -> _CachedSession:
        key = self.signature(args)
        cached = self.sessions.get(key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        if key == self._example_key:
            model = self.model  # the model converted at compile time fits
        else:
            self._stage = "conversion"
            model = self._convert(list(args), static_shapes=True)
        self._stage = "session"
        cached = self._make_session(model, len(self.sessions))
        self.sessions[key] = cached
        return cached

    def _make_session(self, model: ir.Model, index: int) -> _CachedSession:
        import onnxruntime

        targets = dump_targets(self.options.dump_folder)
        if targets:
            self.files.extend(save_dump(model, self.gm, self.name, index, targets))
        proto = ir.to_proto(model)
        opts = onnxruntime.SessionOptions()
        opts.log_severity_level = 3
        if self.options.threads is not None:
            opts.intra_op_num_threads = self.options.threads
        # onnxruntime's threads spin after a run by default: torch's work between two graphs (autograd,
        # the loss, the optimizer) would share the cores with them (AdamW 2.3x slower on 2 threads)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = onnxruntime.InferenceSession(proto.SerializeToString(), opts, providers=list(self.options.providers))
        except Exception as e:
            raise RuntimeError(
                f"onnxruntime cannot load the model converted from graph {self.name!r}: {e}\n"
                f"Use fx2onnx.dump_onnx(prefix, folder) to save the model and its FX graph, then inspect them."
            ) from e
        wanted = {i.name for i in session.get_inputs()}
        return _CachedSession(
            session=session,
            model=model,
            feeds=[(name, index) for name, index in zip(model.meta["input_names"], model.meta["input_indices"]) if name in wanted],
            output_layout=list(model.meta["output_layout"]),
            bfloat16=any("bfloat16" in a.type for a in [*session.get_inputs(), *session.get_outputs()]),
            perms=dict(model.meta.get("input_perms", {})),
        )

    def __call__(self, *args: Any) -> list[Any]:
        # boxed convention: one list of arguments; some wrappers call it unboxed
        args = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        self.n_calls += 1
        if self.fallback is None:
            self._stage = "run"
            try:
                return self._run_onnx(args)
            except Exception as e:
                if not self.options.fallback:
                    raise
                self.fallback = report_fallback(self._fallback_records, self.name, self._stage, e)
        return list(self.gm(*args))  # fallback=True: the aten graph runs eagerly

    @staticmethod
    def _stored(x: Any, perm: tuple[int, ...] | None) -> Any:
        """An input the model takes permuted (see ``permuted_inputs`` in
        :func:`fx2onnx.convert.graph_module.convert_graph_module`): a view when its strides
        are those of the compile-time example, a copy otherwise."""
        if perm is None:
            return x
        x = x.permute(perm)
        return x if x.is_contiguous() else x.contiguous()

    def _run_onnx(self, args: list[Any]) -> list[Any]:
        cached = self._session_for(args)
        self._stage = "run"
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        feeds = {name: to_numpy(_as_pair(self._stored(args[index], cached.perms.get(index)))) for name, index in cached.feeds}
        results = run_session(cached.session, feeds) if cached.bfloat16 else cached.session.run(None, feeds)
        converted: dict[int, torch.Tensor] = {}

        def onnx_output(k: int) -> torch.Tensor:
            if k not in converted:
                converted[k] = _ort_to_torch(results[k])
            return converted[k]

        outputs: list[Any] = []
        for (kind, value), expected in zip(cached.output_layout, self._expected):
            if kind == "view":
                (source, index), chain = value
                t = args[index] if source == "input" else onnx_output(index)
                for target, view_args, view_kwargs in chain:
                    t = _apply_view(target, t, view_args, view_kwargs)
                outputs.append(t if device.type == "cpu" or source == "input" else t.to(device))
                continue
            if kind != "onnx":
                outputs.append(args[value] if kind == "input" else value)
                continue
            t = onnx_output(value)
            if expected in (int, float, bool):
                outputs.append(expected(t.item()))  # a SymInt saved for backward is a Python number
                continue
            if isinstance(expected, tuple) and expected[1].is_complex and t.dim() == expected[0] + 1 and not t.is_complex():
                t = torch.view_as_complex(t)  # a complex value travels as its real pair (trailing dimension 2)
            if expected is not None and (t.dim(), t.dtype) != expected:
                raise RuntimeError(
                    f"Graph {self.name!r}: output {value} is a {t.dtype} tensor of rank {t.dim()} on onnxruntime "
                    f"but torch expects (rank, dtype)={expected}; a converter is wrong. "
                    f"Dump the model with fx2onnx.dump_onnx to inspect it."
                )
            outputs.append(t if device.type == "cpu" else t.to(device))
        return outputs
