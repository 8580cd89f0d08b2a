"""The layers of the package and its import graph, read from the source files.

Each module belongs to one layer; a module imports modules of its own layer or of a lower one, and the
import graph has no circle. ``tests/test_layers.py`` checks both on every change and the design page
``design/layers`` draws the graph at build time from :func:`import_graph`.

.. code-block:: python

    from fx2onnx.layers import import_graph, layer_violations, import_cycles

    graph = import_graph()
    print(len(graph), "modules")
    print(layer_violations(graph))  # [] : no import of a higher layer
    print(import_cycles(graph))  # [] : no circle

Every import statement counts, at the top of a module or inside a function (a function-level import
only defers a heavy third-party package: it is no way around the layers), except those under
``if TYPE_CHECKING:`` and the old import paths kept for one release: a module left at an old path
(:func:`fx2onnx._moved.moved_to`; the names that moved are forwarded by :func:`fx2onnx._moved.moved_names`,
which imports their new module by name).
Only the standard library is used here.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys
import warnings
from pathlib import Path

#: the layers, lowest first: (name, module prefixes, what the layer does)
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("foundation", ("fx2onnx._version", "fx2onnx._moved", "fx2onnx._lazy", "fx2onnx.layers", "fx2onnx.torchvision_cpu", "fx2onnx.torchvision_kernels", "fx2onnx.ties", "fx2onnx.formats",
                    "fx2onnx.ort_values"),
     "names shared by the writer and the readers of a folder, onnxruntime values as numpy arrays, import hooks"),
    ("runtime", ("fx2onnx.runtime",),
     "folder to answers: onnxruntime, tokenizers and processors, never the converter"),
    ("export machinery", ("fx2onnx.flatten", "fx2onnx.frozen", "fx2onnx.validation", "fx2onnx.convert",
                          "fx2onnx.optimizer", "fx2onnx.patches", "fx2onnx.weights", "fx2onnx.compare",
                          "fx2onnx.inspect", "fx2onnx.profiling", "fx2onnx.backend", "fx2onnx.runner"),
     "to_onnx, the optimization levels, the patches, streamed weights, validation and the tools around them"),
    ("inputs", ("fx2onnx.inputs",),
     "what a task feeds a model: the tasks transformers lists, example inputs from a config or a processor"),
    ("deploy", ("fx2onnx.deploy",),
     "folder in, folder out: the pieces of a checkpoint exported, checked and written"),
    ("testing", ("fx2onnx.testing",),
     "helpers writing folders made in code (tiny models, tokenizers, processors) for tests and examples"),
    ("zoo", ("fx2onnx.zoo", "fx2onnx.models", "fx2onnx.scenarios", "fx2onnx.scenario_exporters", "fx2onnx.model_spec"),
     "the sweeps over models and scenarios, their reports and generated pages"),
    ("command line", ("fx2onnx.cli", "fx2onnx.__main__", "fx2onnx"),
     "the commands, and the package's public names"),
)

#: a layer which imports nothing of the converter, whatever its rank: runtime reads folders only
CONVERTER_FREE = {"runtime": ("foundation", "runtime")}


@dataclasses.dataclass(frozen=True)
class Import:
    """One import of a module of the package by another."""

    source: str
    target: str
    line: int
    #: at the top of the module (False: inside a function)
    top: bool


def package_dir() -> Path:
    """The folder of the package ``fx2onnx``."""
    return Path(__file__).resolve().parent


def _module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _lazy_names(package: str, path: Path) -> dict[str, str]:
    """The public names a package loads on first use (:func:`fx2onnx._lazy.lazy_module_names`) and their modules."""
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_module_names" and len(node.args) == 2:
            mapping = ast.literal_eval(node.args[1])
            return {name: f"{package}{target}" for name, target in mapping.items()}
    return {}


def _parse(path: Path, text: str | None = None) -> ast.Module:
    with warnings.catch_warnings():  # a source's own warnings (an invalid escape) are not this check's
        warnings.simplefilter("ignore")
        return ast.parse(path.read_text(encoding="utf-8") if text is None else text, filename=str(path))


def _imports(module: str, path: Path, names: dict[str, Path], lazy: dict[str, dict[str, str]]) -> list[Import]:
    text = path.read_text(encoding="utf-8")
    tree = _parse(path, text)
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def known(target: str) -> str | None:
        while target and target not in names:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            targets: list[str] = []
            if isinstance(child, ast.ImportFrom):
                base = _resolve(module, is_package, child)
                if base and (base == "fx2onnx" or base.startswith("fx2onnx.")):
                    # a submodule, a name a lazy package loads from one of its modules, or a name of the module
                    targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names
                               else lazy.get(base, {}).get(alias.name, base) for alias in child.names]
            elif isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names if alias.name.split(".")[0] == "fx2onnx"]
            for target in targets:
                resolved = known(target)
                # importing fx2onnx.a.b runs the package fx2onnx.a first: an edge to each package above the
                # target but the root (whose public names load lazily) and the importer's own packages
                parents = []
                parent = resolved.rpartition(".")[0] if resolved else ""
                while parent and parent != "fx2onnx":
                    parents.append(parent)
                    parent = parent.rpartition(".")[0]
                for name in [resolved, *parents]:
                    if name and name != module and not module.startswith(name + "."):
                        found.append(Import(module, name, child.lineno, not in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    if "moved_to(__name__" in text:
        return []  # a module left at an old path
    visit(tree, False)
    return found


def import_graph(root: str | os.PathLike | None = None) -> dict[str, list[Import]]:
    """Every module of the package and the imports of the package's modules it makes."""
    folder = Path(root) if root else package_dir()
    names = _module_names(folder)
    lazy = {module: _lazy_names(module, path) for module, path in names.items() if path.name == "__init__.py"}
    return {module: _imports(module, path, names, lazy) for module, path in names.items()}


def layer_of(module: str) -> str:
    """The layer of ``module``: the layer of its longest matching prefix."""
    best, length = None, -1
    for name, prefixes, _ in LAYERS:
        for prefix in prefixes:
            # the package itself (its public names) is one module, not the prefix of every other
            matches = module == prefix or (prefix != "fx2onnx" and module.startswith(prefix + "."))
            if matches and len(prefix) > length:
                best, length = name, len(prefix)
    if best is None:
        raise KeyError(f"{module} belongs to no layer of fx2onnx.layers.LAYERS: add its prefix to one.")
    return best


def _rank(layer: str) -> int:
    return [name for name, _, _ in LAYERS].index(layer)


def layer_violations(graph: dict[str, list[Import]]) -> list[str]:
    """One line per import of a higher layer (or, from a converter-free layer, of the converter)."""
    lines = []
    for module, imports in graph.items():
        source = layer_of(module)
        for imp in imports:
            target = layer_of(imp.target)
            allowed = CONVERTER_FREE.get(source)
            if _rank(target) > _rank(source) or (allowed is not None and target not in allowed):
                lines.append(f"{module}:{imp.line} ({source}) imports {imp.target} ({target})")
    return lines


def import_cycles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    edges = {module: sorted({imp.target for imp in imports}) for module, imports in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges) + 100))

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    try:
        for node in edges:
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return cycles


def layer_edges(graph: dict[str, list[Import]]) -> dict[tuple[str, str], int]:
    """The number of imports from one layer to another (the picture of the design page)."""
    counts: dict[tuple[str, str], int] = {}
    for module, imports in graph.items():
        for imp in imports:
            key = (layer_of(module), layer_of(imp.target))
            if key[0] != key[1]:
                counts[key] = counts.get(key, 0) + 1
    return counts


def layers_dot(graph: dict[str, list[Import]]) -> str:
    """The layers as a graphviz ``dot`` graph, lowest at the bottom, an edge per pair of layers importing."""
    lines = ["digraph layers {", "  rankdir=BT;", '  node [shape=box, style=rounded, fontname="sans-serif"];']
    modules: dict[str, int] = {}
    for module in graph:
        layer = layer_of(module)
        modules[layer] = modules.get(layer, 0) + 1
    for name, _, _ in LAYERS:
        lines.append(f'  "{name}" [label="{name}\\n{modules.get(name, 0)} modules"];')
    for (source, target), count in sorted(layer_edges(graph).items()):
        # drawn from the lower layer up, the arrow on the imported layer
        lines.append(f'  "{target}" -> "{source}" [label="{count}", dir=back];')
    lines.append("}")
    return "\n".join(lines)
