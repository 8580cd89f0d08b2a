"""Rewrites, with :mod:`ast`, ``if`` tests on tensors into :func:`torch.cond`.

torch.export cannot capture a Python ``if`` whose condition depends on the
values of a tensor (``if x.sum() > 0:``). This module rewrites such a function:

* ``if cond: return a`` / ``else: return b`` (or the rest of the function after
  the ``if``) becomes ``return torch.cond(cond, _true, _false, ())``,
* ``if cond: x = ...`` / ``else: x = ...`` becomes
  ``(x,) = torch.cond(cond, _true, _false, (operands,))``; a variable assigned in
  one branch only must be a tensor defined before the ``if``,
* ``if cond: raise ...`` becomes ``torch._check(...)``.

An ``if`` is rewritten when its test calls a tensor method or a torch function
(``x.sum()``, ``torch.max(...)``) or reads a variable assigned from one. Other
``if`` statements (on shapes, on Python values) are kept. Decorators of the
rewritten function are dropped.

.. code-block:: python

    import torch
    from fx2onnx.patches.rewrite import rewrite_function

    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    g = rewrite_function(f).function
    torch.testing.assert_close(g(torch.ones(2)), f(torch.ones(2)))
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import os
import sys
import textwrap
import types
from typing import Any, Callable, Iterable

import torch

from .registry import Patch

TENSOR_METHODS = frozenset(
    "sum any all max min mean prod item norm abs argmax argmin numel_nonzero count_nonzero "
    "eq ne gt ge lt le".split()
)

_PREFIX = "_fx2onnx"


_SHAPE_ATTRIBUTES = frozenset("shape dtype device ndim is_cuda requires_grad layout".split())


def _own_nodes(node: ast.AST) -> Iterable[ast.AST]:
    """Walks a function body without entering nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        sub = stack.pop()
        yield sub
        if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(sub))


def _is_torch_value_call(node: ast.Call) -> bool:
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in TENSOR_METHODS:
        return True
    root = func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    if not (isinstance(root, ast.Name) and root.id == "torch"):
        return False
    # torch.is_tensor, torch.jit.is_tracing, torch.compiler.is_compiling... return Python values
    return not func.attr.startswith("is_") and func.attr not in {"get_default_dtype", "device", "dtype"}


def depends_on_values(expr: ast.AST, tensor_names: set[str]) -> bool:
    """Tells if an expression depends on the values of tensors (not only on shapes)."""
    if isinstance(expr, ast.Call):
        if _is_torch_value_call(expr):
            return True
        if isinstance(expr.func, ast.Name) and expr.func.id in ("int", "float", "bool"):
            # a Python number read from a tensor's value
            return any(depends_on_values(a, tensor_names) for a in expr.args)
        if isinstance(expr.func, ast.Attribute) and depends_on_values(expr.func.value, tensor_names):
            # x.float(), x.view(...) on a tensor
            return expr.func.attr not in {"size", "dim", "numel", "get_device", "is_floating_point"}
        return False
    if isinstance(expr, ast.Name):
        return expr.id in tensor_names
    if isinstance(expr, ast.Compare):
        if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops):
            return False
        return any(depends_on_values(e, tensor_names) for e in [expr.left, *expr.comparators])
    if isinstance(expr, ast.Attribute):
        if expr.attr in _SHAPE_ATTRIBUTES:
            return False
        return depends_on_values(expr.value, tensor_names)
    if isinstance(expr, ast.Subscript):
        return depends_on_values(expr.value, tensor_names)
    if isinstance(expr, ast.BoolOp):
        if isinstance(expr.op, ast.And) and any(_is_tracing_guard(e) for e in expr.values):
            # "not is_tracing(x) and x.all()": already skipped while exporting
            return False
        return any(depends_on_values(e, tensor_names) for e in expr.values)
    if isinstance(expr, ast.UnaryOp):
        return depends_on_values(expr.operand, tensor_names)
    if isinstance(expr, ast.BinOp):
        return depends_on_values(expr.left, tensor_names) or depends_on_values(expr.right, tensor_names)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return any(depends_on_values(e, tensor_names) for e in expr.elts)
    return False


_TRACING_FUNCTIONS = frozenset(
    "is_tracing is_torchdynamo_compiling is_torchdynamo_exporting is_compiling is_exporting is_scripting".split()
)


def _is_tracing_guard(expr: ast.AST) -> bool:
    """``not is_tracing(...)`` or ``not torch.compiler.is_compiling()``..."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        expr = expr.operand
        if isinstance(expr, ast.BoolOp):
            return any(_is_tracing_guard(ast.UnaryOp(op=ast.Not(), operand=e)) for e in expr.values)
        if isinstance(expr, ast.Call):
            func = expr.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            return name in _TRACING_FUNCTIONS
    return False


def _tensor_names(function: ast.AST) -> set[str]:
    """Names assigned from an expression depending on tensor values."""
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in _own_nodes(function):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                if not depends_on_values(node.value, names):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                    for sub in elts:
                        if isinstance(sub, ast.Name) and sub.id not in names:
                            names.add(sub.id)
                            changed = True
    return names


def default_filter(test: ast.expr, tensor_names: set[str]) -> bool:
    """Selects the ``if`` statements to rewrite: the test depends on tensor values."""
    return depends_on_values(test, tensor_names)


def _stored(nodes: list[ast.stmt]) -> list[str]:
    seen: list[str] = []
    for stmt in nodes:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id not in seen:
                seen.append(sub.id)
    return seen


def _read_before_write(nodes: list[ast.stmt]) -> set[str]:
    written: set[str] = set()
    read: set[str] = set()
    for stmt in nodes:
        loads = {s.id for s in ast.walk(stmt) if isinstance(s, ast.Name) and isinstance(s.ctx, ast.Load)}
        read |= loads - written
        written |= set(_stored([stmt]))
    return read


def _ends_with_return(nodes: list[ast.stmt]) -> bool:
    return bool(nodes) and isinstance(nodes[-1], ast.Return) and nodes[-1].value is not None


def _has_return(nodes: list[ast.stmt]) -> bool:
    """Tells if a block returns (not counting nested functions)."""
    for stmt in nodes:
        if isinstance(stmt, ast.Return):
            return True
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
            isinstance(sub, ast.Return) for sub in _own_nodes(stmt)
        ):
            return True
    return False


class _IfRewriter(ast.NodeTransformer):
    def __init__(self, tensor_names: set[str], select: Callable[[ast.expr, set[str]], bool]):
        self.tensor_names = tensor_names
        self.select = select
        self.count = 0
        self.rewritten: list[int] = []

    # statements are handled list by list so that "if ...: return" can take the rest as else branch
    def _rewrite_block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        i = 0
        while i < len(body):
            stmt = self.visit(body[i])
            if isinstance(stmt, ast.If) and self.select(stmt.test, self.tensor_names):
                rest = body[i + 1 :]
                replaced = self._rewrite_if(stmt, rest)
                if replaced is not None:
                    new_stmts, consumed_rest = replaced
                    out.extend(new_stmts)
                    if consumed_rest:
                        return out
                    i += 1
                    continue
            out.append(stmt)
            i += 1
        return out

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.body = self._rewrite_block(node.body)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if (
                isinstance(block, list)
                and block
                and isinstance(block[0], ast.stmt)
                and not isinstance(node, ast.FunctionDef)
            ):
                setattr(node, field, self._rewrite_block(block))
        return node

    def _rewrite_if(self, node: ast.If, rest: list[ast.stmt]) -> tuple[list[ast.stmt], bool] | None:
        # if cond: raise ...
        if len(node.body) == 1 and isinstance(node.body[0], ast.Raise) and not node.orelse:
            message = ast.unparse(node.body[0].exc) if node.body[0].exc is not None else "assertion"
            call = ast.parse(f"{_PREFIX}_check_false({ast.unparse(node.test)}, {message!r})").body[0]
            self._done(node)
            return [ast.copy_location(call, node)], False
        true_body, false_body = node.body, node.orelse
        consumed_rest = False
        if _ends_with_return(true_body) and not false_body and _ends_with_return(rest):
            false_body, consumed_rest = self._rewrite_block(list(rest)), True
        if _ends_with_return(true_body) and _ends_with_return(false_body):
            if _has_return(true_body[:-1]) or _has_return(false_body[:-1]):
                return None
            index = self.count
            stmts = self._branches(index, true_body, false_body, outputs=None, operands=[])
            ret = ast.parse(
                f"return torch.cond({ast.unparse(node.test)}, {_PREFIX}_true_{index}, {_PREFIX}_false_{index}, ())"
            ).body[0]
            self._done(node)
            return [*stmts, ast.copy_location(ret, node)], consumed_rest
        if _has_return(true_body) or _has_return(false_body):
            return None
        outputs = sorted(set(_stored(true_body)) | set(_stored(false_body)))
        if not outputs:
            return None
        operands = sorted(
            n
            for n in outputs
            if n in _read_before_write(true_body)
            or n in _read_before_write(false_body)
            or n not in _stored(true_body)
            or n not in _stored(false_body)
        )
        index = self.count
        stmts = self._branches(index, true_body, false_body, outputs=outputs, operands=operands)
        targets = ", ".join(outputs) + ","
        args = ", ".join(operands) + ("," if operands else "")
        assign = ast.parse(
            f"({targets}) = torch.cond({ast.unparse(node.test)}, {_PREFIX}_true_{index}, "
            f"{_PREFIX}_false_{index}, ({args}))"
        ).body[0]
        self._done(node)
        return [*stmts, ast.copy_location(assign, node)], False

    def _branches(
        self,
        index: int,
        true_body: list[ast.stmt],
        false_body: list[ast.stmt],
        outputs: list[str] | None,
        operands: list[str],
    ) -> list[ast.stmt]:
        stmts = []
        for name, body in ((f"{_PREFIX}_true_{index}", true_body), (f"{_PREFIX}_false_{index}", false_body)):
            code = f"def {name}({', '.join(operands)}):\n    pass\n"
            fn = ast.parse(code).body[0]
            fn.body = list(body)
            if outputs is None:
                last = fn.body[-1]
                fn.body[-1] = ast.copy_location(
                    ast.Return(ast.Call(ast.Name(f"{_PREFIX}_clone", ast.Load()), [last.value], [])), last
                )
            else:
                # torch.cond rejects a branch returning one of its inputs: outputs are cloned
                values = ", ".join(f"{_PREFIX}_clone({n})" for n in outputs)
                fn.body.append(ast.parse(f"return ({values},)").body[0])
            stmts.append(fn)
        self.count += 1
        return stmts

    def _done(self, node: ast.If) -> None:
        self.rewritten.append(node.lineno)


def clone(value: Any) -> Any:
    """Clones the tensors of a value (torch.cond does not let a branch return an input)."""
    return torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, value)


def check_false(condition: Any, message: str) -> None:
    """Replaces ``if condition: raise``: fails with ``message`` if ``condition`` is true.

    A tensor condition becomes a runtime assertion when exported.
    """
    if isinstance(condition, torch.Tensor):
        condition = condition.any().item()
    torch._check(torch.sym_not(condition), lambda: message)


@dataclasses.dataclass
class RewrittenFunction:
    """A rewritten function, its sources and the lines of the rewritten ``if``."""

    #: the function as the model defines it
    original: Callable[..., Any]
    #: the function compiled from the rewritten source
    function: Callable[..., Any]
    #: the source of the original function
    original_source: str
    #: the rewritten source
    source: str
    #: the lines of the original source which were rewritten (an ``if`` into ``torch.cond``, ``int(t)`` into ``t.item()``)
    lines: list[int]

    @property
    def qualname(self) -> str:
        """The qualified name of the original function."""
        return getattr(self.original, "__qualname__", getattr(self.original, "__name__", "function"))

    def diff(self) -> str:
        """The unified diff between the original and the rewritten source."""
        return "".join(
            difflib.unified_diff(
                self.original_source.splitlines(keepends=True),
                self.source.splitlines(keepends=True),
                fromfile=f"{self.qualname} (original)",
                tofile=f"{self.qualname} (rewritten)",
            )
        )

    def dump(self, folder: str | os.PathLike) -> list[str]:
        """Writes the original, the rewritten function and the diff into ``folder``."""
        os.makedirs(folder, exist_ok=True)
        base = os.path.join(folder, self.qualname.replace("<", "").replace(">", "").replace(".", "_"))
        written = []
        for suffix, text in (
            (".original.py", self.original_source),
            (".rewritten.py", self.source),
            (".diff", self.diff()),
        ):
            with open(base + suffix, "w", encoding="utf-8") as f:
                f.write(text)
            written.append(base + suffix)
        return written


def _parse_function(function: Callable[..., Any]) -> tuple[str, ast.FunctionDef]:
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as e:
        raise ValueError(f"The source of {function!r} cannot be read, it cannot be rewritten: {e}") from e
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise ValueError(f"{function!r} is not defined with 'def', it cannot be rewritten.")
    return source, node


def _matching_nodes(
    function: Callable[..., Any], keep: Callable[[ast.AST, set[str]], bool]
) -> list[tuple[int, ast.AST]]:
    """``(line in the file, node)`` for each node of ``function``'s body that ``keep(node, tensor_names)`` selects."""
    _, node = _parse_function(inspect.unwrap(function))
    names = _tensor_names(node)
    first = inspect.unwrap(function).__code__.co_firstlineno
    return [(first + sub.lineno - 1, sub) for sub in _own_nodes(node) if keep(sub, names)]


def find_ifs_to_rewrite(
    function: Callable[..., Any], select: Callable[[ast.expr, set[str]], bool] | None = None
) -> list[tuple[int, str]]:
    """Returns ``(line, test)`` for each ``if`` of ``function`` the rewriting selects."""
    select = select or default_filter
    found = _matching_nodes(function, lambda sub, names: isinstance(sub, ast.If) and select(sub.test, names))
    return [(line, ast.unparse(sub.test)) for line, sub in found]  # type: ignore[attr-defined]


def read_int(value: Any) -> Any:
    """``int(value)``; a tensor's value is read with ``.item()``: a symbolic integer while exporting."""
    if isinstance(value, torch.Tensor):
        item = (value.long() if value.dtype == torch.bool else value).item()
        return item if isinstance(item, (int, torch.SymInt)) else torch.sym_int(item)
    return int(value)


def read_float(value: Any) -> Any:
    """``float(value)``; a tensor's value is read with ``.item()``: a symbolic float while exporting."""
    if isinstance(value, torch.Tensor):
        item = (value.float() if value.dtype == torch.bool else value).item()
        return item if isinstance(item, (float, torch.SymFloat)) else torch.sym_float(item)
    return float(value)


_SCALAR_READS = {"int": f"{_PREFIX}_read_int", "float": f"{_PREFIX}_read_float"}


class _ScalarReadRewriter(ast.NodeTransformer):
    """``int(e)`` / ``float(e)`` of an expression ``e`` depending on tensor values -> :func:`read_int` /
    :func:`read_float`: torch.export cannot turn a tensor into a Python number, ``.item()`` gives a
    symbolic one."""

    def __init__(self, tensor_names: set[str]):
        self.tensor_names = tensor_names
        self.rewritten: list[int] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _is_scalar_read(node, self.tensor_names):
            self.rewritten.append(node.lineno)
            helper = ast.Name(id=_SCALAR_READS[node.func.id], ctx=ast.Load())  # type: ignore[attr-defined]
            return ast.copy_location(ast.Call(func=helper, args=node.args, keywords=[]), node)
        return node


def _is_scalar_read(node: ast.AST, tensor_names: set[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _SCALAR_READS
        and len(node.args) == 1
        and not node.keywords
        and depends_on_values(node.args[0], tensor_names)
    )


def find_scalar_reads(function: Callable[..., Any]) -> list[tuple[int, str]]:
    """Returns ``(line, call)`` for each ``int(...)`` / ``float(...)`` of a tensor value in ``function``."""
    found = sorted(_matching_nodes(function, _is_scalar_read), key=lambda item: (item[0], item[1].col_offset))
    return [(line, ast.unparse(sub)) for line, sub in found]


def rewrite_function(
    function: Callable[..., Any],
    select: Callable[[ast.expr, set[str]], bool] | None = None,
    scalar_reads: bool = False,
) -> RewrittenFunction:
    """Rewrites the ``if`` statements of ``function`` selected by ``select`` into torch.cond.

    :param function: a Python function or method (not a builtin, source readable)
    :param select: ``select(test, tensor_names) -> bool``, :func:`default_filter` by default
    :param scalar_reads: also ``int(e)`` / ``float(e)`` of tensor values into ``e.item()``
        (:func:`read_int`, :func:`read_float`)
    :return: a :class:`RewrittenFunction`; ``.function`` behaves like the original
    """
    rewriter = _IfRewriter(set(), select or default_filter)
    reads = _ScalarReadRewriter(set())

    def transform(node: ast.FunctionDef) -> ast.FunctionDef:
        rewriter.tensor_names = reads.tensor_names = _tensor_names(node)
        node = rewriter.visit(node)
        return reads.visit(node) if scalar_reads else node

    helpers = {
        f"{_PREFIX}_check_false": check_false, f"{_PREFIX}_clone": clone,
        _SCALAR_READS["int"]: read_int, _SCALAR_READS["float"]: read_float,
    }
    return transform_function(function, transform, helpers, lambda: sorted(rewriter.rewritten + reads.rewritten))


def transform_function(
    function: Callable[..., Any],
    transform: Callable[[ast.FunctionDef], ast.FunctionDef],
    helpers: dict[str, Any],
    lines: Callable[[], list[int]] = list,
) -> RewrittenFunction:
    """Recompiles ``function`` after ``transform`` changed its syntax tree; ``helpers`` are
    the names the new code calls (``torch`` is always one); decorators are dropped."""
    function = inspect.unwrap(function)
    if isinstance(function, types.MethodType):
        function = function.__func__
    source, node = _parse_function(function)
    node.decorator_list = []
    node = transform(node)
    module = ast.Module(body=[node], type_ignores=[])
    ast.fix_missing_locations(module)
    new_source = ast.unparse(module) + "\n"

    # The function is defined inside a factory whose parameters are the free
    # variables of the original (its closure) and the helpers: the new function
    # keeps the module's globals, which torch.compile's guards look up by name.
    helpers = {"torch": torch, **helpers}
    freevars = list(function.__code__.co_freevars)
    params = [*freevars, *helpers]
    factory_name = f"{_PREFIX}_factory_{node.name}"
    factory_src = f"def {factory_name}({', '.join(params)}):\n" + textwrap.indent(new_source, "    ")
    factory_src += f"    return {node.name}\n"
    namespace = function.__globals__
    exec(compile(factory_src, f"<rewritten {function.__qualname__}>", "exec"), namespace)  # noqa: S102
    factory = namespace.pop(factory_name)
    cells = [c.cell_contents for c in function.__closure__ or ()]
    new_function = factory(*cells, *helpers.values())
    new_function.__qualname__ = function.__qualname__
    new_function.__module__ = function.__module__
    new_function.__doc__ = function.__doc__
    new_function.__wrapped__ = function
    return RewrittenFunction(function, new_function, source, new_source, lines())


def _owner_and_name(function: Callable[..., Any]) -> tuple[Any, str]:
    """Finds the class or module defining a function from its ``__qualname__``."""
    module = sys.modules.get(function.__module__)
    parts = function.__qualname__.split(".")
    if module is None:
        raise ValueError(
            f"{function.__qualname__} comes from module {function.__module__!r} which is not in "
            f"sys.modules: import it as a module to rewrite it."
        )
    if "<locals>" in parts:
        raise ValueError(
            f"{function.__qualname__} is a local function: give the method of a class or a "
            f"module-level function to rewrite."
        )
    owner: Any = module
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def collect_functions(rewrite: Any) -> list[Callable[..., Any]]:
    """Turns the ``rewrite`` argument into a list of functions.

    Accepts a function or method, a class (its ``forward``), a
    :class:`torch.nn.Module` (the ``forward`` of every submodule class having an
    ``if`` to rewrite) or a list of those.
    """
    if rewrite is None:
        return []
    if isinstance(rewrite, (list, tuple, set)):
        functions: list[Callable[..., Any]] = []
        for item in rewrite:
            for f in collect_functions(item):
                if f not in functions:
                    functions.append(f)
        return functions
    if isinstance(rewrite, torch.nn.Module):
        classes = []
        for module in rewrite.modules():
            if type(module) not in classes:
                classes.append(type(module))
        found = []
        for cls in classes:
            forward = cls.__dict__.get("forward")
            if forward is not None and _safe_find(forward):
                found.append(forward)
        return found
    if isinstance(rewrite, type):
        forward = rewrite.__dict__.get("forward")
        if forward is None:
            raise ValueError(f"Class {rewrite.__name__} defines no forward method to rewrite.")
        return [forward]
    if isinstance(rewrite, types.MethodType):
        return [rewrite.__func__]
    if callable(rewrite):
        return [rewrite]
    raise TypeError(
        f"rewrite must be a function, a method, a class or a torch.nn.Module, not {type(rewrite)}."
    )


def _safe_find(function: Callable[..., Any]) -> bool:
    try:
        return bool(find_ifs_to_rewrite(function))
    except (ValueError, SyntaxError):
        return False


def rewrite_patches(rewrite: Any, dump_rewriting: str | os.PathLike | None = None) -> list[Any]:
    """Builds one :class:`~fx2onnx.patches.registry.Patch` per function to rewrite."""

    patches = []
    for function in collect_functions(rewrite):
        owner, name = _owner_and_name(function)
        target = (
            f"{owner.__module__}.{owner.__qualname__}.{name}"
            if isinstance(owner, type)
            else f"{owner.__name__}.{name}"
        )
        rewritten = rewrite_function(function)
        if dump_rewriting is not None:
            rewritten.dump(dump_rewriting)

        def make(original: Any, rewritten: RewrittenFunction = rewritten) -> Any:
            return rewritten.function

        patches.append(
            Patch(
                name=f"rewrite:{function.__qualname__}",
                kind="rewrite",
                target=target,
                make=make,
                doc=f"if statements on tensors rewritten into torch.cond (lines {rewritten.lines})",
            )
        )
    return patches


def iter_module_functions(module: types.ModuleType) -> Iterable[Callable[..., Any]]:
    """Functions and methods defined in a module (not imported ones)."""
    for value in list(vars(module).values()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            yield value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr in value.__dict__.values():
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, types.FunctionType):
                    yield attr
