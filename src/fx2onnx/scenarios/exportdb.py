"""torch's export database (``torch._export.db``) as a second source of cases.

Each example gives one input set; the second one has the same shapes and new
random values (floating tensors only). Dynamic runs only happen for the examples
which define dynamic shapes.
"""

from __future__ import annotations

import copy
import inspect

import torch

from .case import Case


def _perturbed(value, generator: torch.Generator):
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return torch.randn(value.shape, generator=generator).to(value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_perturbed(v, generator) for v in value)
    if isinstance(value, dict):
        return {k: _perturbed(v, generator) for k, v in value.items()}
    return copy.deepcopy(value)


def _source(model: torch.nn.Module) -> str:
    try:
        return inspect.getsource(inspect.getmodule(type(model)))
    except (OSError, TypeError):
        return f"# source not available for {type(model).__name__}"


def exportdb_cases() -> list[Case]:
    """One :class:`Case` per example of ``torch._export.db.examples.all_examples()``."""
    from torch._export.db.examples import all_examples

    generator = torch.Generator().manual_seed(1)
    cases = []
    for name, example in sorted(all_examples().items()):
        model = example.model
        args = tuple(example.example_args)
        kwargs = dict(example.example_kwargs or {})
        second = (_perturbed(args, generator), _perturbed(kwargs, generator))

        def make_model(model=model) -> torch.nn.Module:
            return copy.deepcopy(model).eval()

        description = " ".join((example.description or "").split())
        support = example.support_level.name.lower().replace("_", " ")
        cases.append(
            Case(
                name=f"exportdb_{name}",
                family="exportdb",
                doc=f"{description} (exportdb tags: {', '.join(sorted(example.tags)) or 'none'}; "
                f"support level: {support})",
                code=_source(model),
                make_model=make_model,
                inputs=[(args, kwargs), second],
                dynamic_shapes=example.dynamic_shapes,
                has_dynamic=example.dynamic_shapes is not None,
            )
        )
    return cases
