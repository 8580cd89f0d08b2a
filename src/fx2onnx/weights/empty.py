"""Models whose parameters hold no memory: built on the meta device, captured on empty storage.

:func:`torch.export.export` needs tensors on the inputs' device: a model whose weights
live on the ``meta`` device cannot be captured with CPU inputs. :func:`empty_weights`
gives each meta parameter and buffer an uninitialized CPU storage for the time of the
export. ``torch.empty`` only reserves address space: the pages are never written nor
read by the capture, so they take no memory. The values come from elsewhere (a
checkpoint, see :mod:`fx2onnx.weights.checkpoint`): the converter must never read these.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Builds the parameters of the modules created inside on the meta device, the buffers
    on the CPU: computed buffers (rotary frequencies) keep their values, weights take no memory.

    .. code-block:: python

        with parameters_on_meta():
            model = transformers.LlamaForCausalLM(config)
    """
    register = torch.nn.Module.register_parameter

    def register_on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            kwargs = {"requires_grad": param.requires_grad}
            module._parameters[name] = type(param)(param.to("meta"), **kwargs)

    torch.nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def stray_parameters_to_meta(model: torch.nn.Module) -> list[str]:
    """Moves to the meta device the parameters of ``model`` its constructor made elsewhere although it was built
    under ``torch.device("meta")``: a factory ignoring the device context (``torch.normal(mean, std, size=...)``,
    DiffLlama's lambdas) gives CPU values an export from a checkpoint would keep instead of the checkpoint's.
    On the meta device they are read from the checkpoint as every other weight. Tied parameters stay tied.
    Returns their names."""
    moved: dict[int, torch.nn.Parameter] = {}
    names = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name, param in list(module._parameters.items()):
            if param is None or param.is_meta:
                continue
            if id(param) not in moved:
                moved[id(param)] = type(param)(param.to("meta"), requires_grad=param.requires_grad)
            module._parameters[name] = moved[id(param)]
            names.append(f"{prefix}.{name}" if prefix else name)
    return names


def meta_tensor_names(model: torch.nn.Module) -> list[str]:
    """The names (as in ``state_dict``, buffers included, every alias of a tied weight) of the
    tensors on the meta device."""
    names = []
    for name, tensor in model.named_parameters(remove_duplicate=False):
        if tensor.is_meta:
            names.append(name)
    for name, tensor in model.named_buffers(remove_duplicate=False):
        if tensor.is_meta:
            names.append(name)
    return names


def _owner(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def _unset(dtype: torch.dtype) -> Any:
    """The value of a buffer no one computed: NaN, the smallest integer, False."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return False if dtype == torch.bool else torch.iinfo(dtype).min


def _still_unset(buffer: torch.Tensor) -> bool:
    if buffer.dtype == torch.bool:
        return False
    if buffer.is_floating_point() or buffer.is_complex():
        return bool(torch.isnan(buffer).any())
    return bool((buffer == _unset(buffer.dtype)).any())


@contextlib.contextmanager
def empty_weights(model: torch.nn.Module, buffers: dict[str, Any] | None = None) -> Iterator[list[str]]:
    """Gives every meta tensor of ``model`` an uninitialized CPU storage, restored on exit.

    Tied weights stay tied (one storage per meta tensor). ``buffers`` gives the values of
    meta buffers the checkpoint does not hold (a rotary embedding's frequencies); a meta
    buffer not given is computed by transformers' ``_init_weights`` when the model has one,
    else the export is refused: its values would be garbage.

    :return: (as the context value) the names of the tensors left uninitialized; their
        values must be given to :func:`fx2onnx.to_onnx` through ``weights=``
    """
    buffers = dict(buffers or {})
    replaced: dict[int, torch.Tensor] = {}
    saved: list[tuple[torch.nn.Module, str, bool, torch.Tensor]] = []
    empty: list[str] = []

    def storage(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in replaced:
            replaced[id(tensor)] = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
        return replaced[id(tensor)]

    try:
        for name, param in list(model.named_parameters(remove_duplicate=False)):
            if param.is_meta:
                module, attr = _owner(model, name)
                saved.append((module, attr, True, param))
                if id(param) not in replaced:
                    replaced[id(param)] = torch.nn.Parameter(storage(param), requires_grad=False)
                module._parameters[attr] = replaced[id(param)]
                empty.append(name)
        missing = []
        for name, buf in list(model.named_buffers(remove_duplicate=False)):
            if buf.is_meta:
                module, attr = _owner(model, name)
                saved.append((module, attr, False, buf))
                if name in buffers:
                    module._buffers[attr] = torch.as_tensor(buffers[name]).to(buf.dtype).reshape(buf.shape)
                elif attr in module._non_persistent_buffers_set:
                    # an integer buffer (CLIP's position ids) cannot hold NaN: the smallest integer marks it
                    module._buffers[attr] = torch.full(buf.shape, _unset(buf.dtype), dtype=buf.dtype)
                    missing.append((name, module, attr))
                else:
                    module._buffers[attr] = storage(buf)
                    empty.append(name)
        for name, module, attr in missing:
            # the module's own initialization, else an enclosing one's (Falcon-H1's model sets each mixer's
            # mup_vector), by the innermost pretrained model first, as transformers does (Gemma 3n's reads the
            # text model's hidden_size, which its causal LM does not have)
            parts = name.split(".")[:-1]
            owners = [module] + [model.get_submodule(".".join(parts[:i])) for i in range(len(parts) - 1, -1, -1)]
            inits = [o._init_weights for o in owners if callable(getattr(o, "_init_weights", None))]
            for owner, init in ((o, i) for o in owners for i in inits):
                try:
                    with torch.no_grad():
                        init(owner)
                except Exception:  # noqa: BLE001 - an initialization reading what its own model has only
                    continue
                if not _still_unset(module._buffers[attr]):
                    break
            if _still_unset(module._buffers[attr]):
                raise ValueError(
                    f"The buffer {name!r} is on the meta device and no checkpoint holds it (it is computed "
                    "by the module's constructor): build the model within "
                    "fx2onnx.weights.parameters_on_meta() (parameters on meta, buffers computed) "
                    "or give its value with buffers={name: tensor}."
                )
        yield empty
    finally:
        for module, attr, is_param, tensor in reversed(saved):
            (module._parameters if is_param else module._buffers)[attr] = tensor
