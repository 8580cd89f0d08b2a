"""The backend object given to :func:`torch.compile` and its factory."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..convert import registry
from ..convert.builder import DEFAULT_OPSET
from ..convert.dispatcher import Dispatcher
from ..convert.errors import UnsupportedOpError
from ..optimizer.api import resolve_level
from .fallback import Fallback, report_fallback
from .runner import BackendOptions, GraphRunner


class OrtBackend:
    """A :func:`torch.compile` backend: aot_autograd, then fx2onnx, then onnxruntime.

    Create it with :func:`make_onnxruntime_backend`. It keeps every
    :class:`GraphRunner` it created in :attr:`runners` (in compilation order),
    which tells how many graphs were converted and how often their sessions
    were reused.
    """

    def __init__(self, options: BackendOptions):
        self.options = options
        self.runners: list[GraphRunner] = []
        #: the graphs running eagerly (``fallback=True``), see :mod:`fx2onnx.backend.fallback`
        self.fallbacks: list[Fallback] = []
        self._aot: Any = None
        self._graph_index = 0

    def __repr__(self) -> str:
        return f"OrtBackend({self.options}, graphs={len(self.runners)})"

    def _compiler(self, kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Any]:
        def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            return self.compile_graph(gm, example_inputs, kind)

        return compile_graph

    def compile_graph(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str = "forward") -> Any:
        """Converts one aten graph; returns the callable running it (boxed calling convention)."""
        name = f"g{self._graph_index}_{kind}"
        self._graph_index += 1
        try:
            runner = GraphRunner(gm, example_inputs, name, self.options, self.fallbacks)
        except Exception as e:
            if isinstance(e, UnsupportedOpError):
                e.args = (
                    f"{e.args[0]}\nWith torch.compile, give the converters to the backend: "
                    f"make_onnxruntime_backend(dispatcher=fx2onnx.Dispatcher({{...}})), "
                    f"or fallback=True to run this graph eagerly.",
                )
            if not self.options.fallback:
                raise
            report_fallback(self.fallbacks, name, "conversion", e)
            from torch._functorch.aot_autograd import make_boxed_func

            return make_boxed_func(gm.forward)
        self.runners.append(runner)
        return runner

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        if self._aot is None:
            from torch._dynamo.backends.common import aot_autograd

            self._aot = aot_autograd(
                fw_compiler=self._compiler("forward"),
                bw_compiler=self._compiler("backward"),
                inference_compiler=self._compiler("inference"),
                decompositions=self.decompositions() if self.options.decompose else {},
            )
        if not self.options.fallback:
            return self._aot(gm, example_inputs)
        try:
            return self._aot(gm, example_inputs)
        except Exception as e:  # aot_autograd cannot trace the graph dynamo captured
            report_fallback(self.fallbacks, f"g{self._graph_index}_dynamo", "aot_autograd", e)
            self._graph_index += 1
            return gm.forward

    def decompositions(self) -> dict[Any, Callable[..., Any]]:
        """torch's decompositions of the ops which have no converter.

        An op with a converter (built-in or given by the dispatcher) stays as it is.
        """
        from torch._decomp import core_aten_decompositions

        dispatcher = self.options.dispatcher
        table = core_aten_decompositions()
        return {
            op: fn
            for op, fn in table.items()
            if registry.lookup(op) is None and (dispatcher is None or dispatcher.find(op) is None)
        }

    def stats(self) -> dict[str, int]:
        """Counts: converted graphs, sessions, calls, session cache hits, eager fallbacks."""
        return {
            "graphs": len(self.runners),
            "sessions": sum(len(r.sessions) for r in self.runners),
            "calls": sum(r.n_calls for r in self.runners),
            "cache_hits": sum(r.cache_hits for r in self.runners),
            "fallbacks": len(self.fallbacks),
        }

    def reset(self) -> None:
        """Forgets the runners and the counters (call :func:`torch._dynamo.reset` too)."""
        self.runners.clear()
        self.fallbacks.clear()
        self._graph_index = 0


def make_onnxruntime_backend(
    *,
    dynamic: bool = False,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    dump_folder: str | None = None,
    verbose: int = 0,
    fallback: bool = False,
    target_opset: int = DEFAULT_OPSET,
    dispatcher: Dispatcher | None = None,
    optimize: bool | str = False,
    decompose: bool = True,
    threads: int | None = None,
) -> OrtBackend:
    """Creates a :func:`torch.compile` backend running the captured graphs on onnxruntime.

    :param dynamic: keep the symbolic dimensions dynamo gives in the ONNX models
        (one session per input ranks); otherwise every new input shape gets its
        own model with static shapes (one session per shapes)
    :param providers: onnxruntime execution providers
    :param dump_folder: if given, every ONNX model is saved there with the FX graph
        it comes from (see also :func:`fx2onnx.dump_onnx`)
    :param verbose: prints the graphs being converted
    :param fallback: by default (False) an error raises as soon as a graph cannot be
        traced by aot_autograd, converted, loaded or run by onnxruntime; with True,
        that graph runs eagerly instead (the others still run on onnxruntime), a
        :class:`fx2onnx.backend.FallbackWarning` names the graph and the error and
        :attr:`OrtBackend.fallbacks` keeps the records (:mod:`fx2onnx.backend.fallback`)
    :param target_opset: ONNX opset
    :param dispatcher: user converters, :class:`fx2onnx.Dispatcher`
    :param optimize: True runs onnxscript's optimizer on every model (constant folding,
        dead code; onnxruntime optimizes the graph anyway when it creates a session);
        a level name of :func:`fx2onnx.optimize` (``"onnxruntime"``: onnxruntime's
        fused operators) runs that level
    :param decompose: an op without converter is decomposed with torch's core aten
        decompositions when there is one (see :meth:`OrtBackend.decompositions`)
    :param threads: onnxruntime's ``intra_op_num_threads``; None leaves onnxruntime's
        default (one thread per physical core), whatever :func:`torch.set_num_threads` says
    :return: the backend, give it to ``torch.compile(model, backend=...)``

    .. code-block:: python

        import torch
        from fx2onnx.backend import make_onnxruntime_backend

        backend = make_onnxruntime_backend(dynamic=True)
        compiled = torch.compile(torch.nn.Linear(4, 2), backend=backend, dynamic=True)
        compiled(torch.randn(3, 4)), compiled(torch.randn(5, 4))
        print(backend.stats())
    """
    if isinstance(providers, str):
        raise TypeError(f"providers must be a list of provider names, got the string {providers!r}: use [{providers!r}].")
    import onnxruntime

    available = onnxruntime.get_available_providers()
    missing = [p for p in providers if p not in available]
    if missing:
        raise ValueError(f"onnxruntime does not have the providers {missing}; available: {available}.")
    if dispatcher is not None and not isinstance(dispatcher, Dispatcher):
        raise TypeError(f"dispatcher must be a fx2onnx.Dispatcher, got {type(dispatcher).__name__}.")
    if not isinstance(target_opset, int) or not 18 <= target_opset <= 23:
        raise ValueError(f"target_opset must be an int in [18, 23], got {target_opset!r}.")

    level = resolve_level(optimize)  # raises on an unknown level name
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}.")
    options = BackendOptions(
        dynamic=bool(dynamic),
        providers=tuple(providers),
        dump_folder=None if dump_folder is None else str(dump_folder),
        verbose=verbose,
        fallback=bool(fallback),
        target_opset=target_opset,
        dispatcher=dispatcher,
        optimize=level or False,
        threads=threads,
        decompose=bool(decompose),
    )
    return OrtBackend(options)


#: the default backend: ``torch.compile(model, backend=onnxruntime_backend)``
onnxruntime_backend = make_onnxruntime_backend()
