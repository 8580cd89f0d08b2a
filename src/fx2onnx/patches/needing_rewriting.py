"""Which functions of a transformers model contain ``if`` tests on tensors.

:func:`code_needing_rewriting` scans, with :mod:`ast`, the modeling module of a
class and the shared modules of transformers its models call (rotary
embeddings, masks, caches), and reports the ``if`` statements whose test
depends on tensor values, which torch.export cannot capture. Rows already
handled by a patch of :mod:`fx2onnx.patches.transformers_fixes` say so.

.. code-block:: python

    from fx2onnx import code_needing_rewriting

    for row in code_needing_rewriting("LlamaForCausalLM"):
        print(row["function"], row["line"], row["test"], row["handled_by"])
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from .rewrite import find_ifs_to_rewrite, iter_module_functions

SHARED_MODULES = (
    "transformers.modeling_rope_utils",
    "transformers.masking_utils",
    "transformers.cache_utils",
    "transformers.integrations.sdpa_attention",
)

# function qualname -> the patch of transformers_fixes handling it
_HANDLED = {
    "dynamic_rope_update.<locals>.dynamic_frequency_update": "<RotaryEmbedding>.forward (dynamic rope)",
}


def code_needing_rewriting(class_name: str | type) -> list[dict[str, Any]]:
    """Lists the ``if`` tests on tensors met by a transformers model class.

    :param class_name: a class of transformers (``"LlamaForCausalLM"``) or the class
    :return: rows ``{"module", "function", "line", "test", "handled_by"}``
    """
    if isinstance(class_name, str):
        import transformers

        cls = getattr(transformers, class_name, None)
        if cls is None:
            raise ValueError(f"transformers has no class {class_name!r}.")
    else:
        cls = class_name
    modules = [cls.__module__, *SHARED_MODULES]
    rows: list[dict[str, Any]] = []
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for function in iter_module_functions(module):
            for candidate in [function, *_inner_functions(function)]:
                try:
                    found = find_ifs_to_rewrite(candidate)
                except (ValueError, SyntaxError, OSError, TypeError):
                    continue
                for line, test in found:
                    qualname = getattr(candidate, "__qualname__", str(candidate))
                    rows.append(
                        {
                            "module": module_name,
                            "function": qualname,
                            "line": line,
                            "test": test,
                            "handled_by": _HANDLED.get(qualname, ""),
                        }
                    )
    unique = {(r["module"], r["function"], r["line"]): r for r in rows}
    return sorted(unique.values(), key=lambda r: (r["module"], r["line"]))


def _inner_functions(function: Any) -> list[Any]:
    """Rebuilds nested functions (defined with def inside ``function``) as function objects."""
    import types

    inner = []
    code = getattr(function, "__code__", None)
    if code is None:
        return inner
    for const in code.co_consts:
        if inspect.iscode(const):
            try:
                f = types.FunctionType(
                    const,
                    function.__globals__,
                    const.co_name,
                    None,
                    tuple(_cell(None) for _ in const.co_freevars) or None,
                )
            except (TypeError, ValueError):
                continue
            inner.append(f)
            inner.extend(_inner_functions(f))
    return inner


def _cell(value: Any) -> Any:
    return (lambda: value).__closure__[0]
