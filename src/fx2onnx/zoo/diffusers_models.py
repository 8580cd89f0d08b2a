"""diffusers' model classes: discovered from the library, tiny configurations for those users export.

:func:`diffusers_classes` lists every :class:`diffusers.ModelMixin` subclass diffusers exports
(about 150: UNets, autoencoders, DiT-style transformers, ControlNets...), and the entry points
the zoo runs for them: an autoencoder gives two rows, ``AutoencoderKL.encode`` and
``AutoencoderKL.decode``. :data:`TINY` holds the tiny configuration and the inputs of the
classes the zoo builds (the denoisers of Stable Diffusion 1/2/XL, SD3, Flux, DiT, PixArt, Sana,
their ControlNets and autoencoders); a class without one is listed with step ``config``:
the page says it is not built yet, not that it fails.

.. code-block:: python

    from fx2onnx.zoo.diffusers_models import build_diffusers_model

    case = build_diffusers_model("UNet2DConditionModel", shapes="image")
    case.model(case.export_input, **case.export_kwargs)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .timm_models import TimmCase as ModelCase

_UNET_BLOCKS = dict(
    block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
)
_VAE = dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8, latent_channels=4,
            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2)


@dataclass(frozen=True)
class Tiny:
    """A tiny configuration and how to build the inputs of one entry point."""

    #: the keyword arguments building a tiny model of the class
    config: dict
    #: the latent (or image) channels of the first input, the number of frames for video
    channels: int
    #: the side of the first input (height and width)
    side: int
    #: builds the keyword inputs from (batch, side, generator)
    kwargs: Callable[[int, int, torch.Generator], dict] = lambda b, s, g: {}
    #: the method exported (``forward``, ``encode``, ``decode``)
    method: str = "forward"
    #: the first input is a sequence of packed patches (Flux) rather than an image
    packed: bool = False
    #: why this configuration differs from the default of the class
    reason: str = ""


def _timestep(b, s, g):
    return {"timestep": torch.rand(b, generator=g) * 999}


def _text(dim: int, length: int = 7):
    def build(b, s, g):
        return {"timestep": torch.rand(b, generator=g) * 999, "encoder_hidden_states": torch.randn(b, length, dim, generator=g)}

    return build


def _sd3(b, s, g):
    return {**_text(32)(b, s, g), "pooled_projections": torch.randn(b, 16, generator=g)}


def _flux(b, s, g):
    side = s // 2
    ids = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij"), -1).reshape(-1, 2)
    img_ids = torch.cat([torch.zeros(ids.shape[0], 1), ids.float()], 1)
    return {**_sd3(b, s, g), "img_ids": img_ids, "txt_ids": torch.zeros(7, 3)}


def _controlnet(b, s, g):
    return {**_text(32)(b, s, g), "controlnet_cond": torch.rand(b, 3, s * 2, s * 2, generator=g)}


#: class (or ``class.method``) -> its tiny configuration and inputs
TINY: dict[str, Tiny] = {
    "UNet2DConditionModel": Tiny(dict(_UNET_BLOCKS, sample_size=16, cross_attention_dim=32, attention_head_dim=4,
                                      in_channels=4, out_channels=4), 4, 16, _text(32)),
    "UNet2DModel": Tiny(dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8, sample_size=16,
                             down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                             up_block_types=("AttnUpBlock2D", "UpBlock2D"), attention_head_dim=4), 3, 16, _timestep),
    "ControlNetModel": Tiny(dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
                                 cross_attention_dim=32, attention_head_dim=4,
                                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                 conditioning_embedding_out_channels=(8, 16)), 4, 16, _controlnet,
                            reason="a conditioning image twice the latent side (one downsampling of the embedding)"),
    "AutoencoderKL.encode": Tiny(dict(_VAE), 3, 32, method="encode"),
    "AutoencoderKL.decode": Tiny(dict(_VAE), 4, 16, method="decode"),
    "AutoencoderTiny.decode": Tiny(dict(encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
                                        num_encoder_blocks=(1, 1), num_decoder_blocks=(1, 1)), 4, 16, method="decode"),
    "VQModel.decode": Tiny(dict(_VAE, num_vq_embeddings=32, vq_embed_dim=4), 4, 16, method="decode"),
    "SD3Transformer2DModel": Tiny(dict(sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2,
                                       attention_head_dim=8, num_attention_heads=2, joint_attention_dim=32,
                                       caption_projection_dim=16, pooled_projection_dim=16, pos_embed_max_size=32),
                                  4, 16, _sd3),
    "FluxTransformer2DModel": Tiny(dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                        attention_head_dim=8, num_attention_heads=2, joint_attention_dim=32,
                                        pooled_projection_dim=16, axes_dims_rope=(2, 2, 4)), 16, 16, _flux,
                                   packed=True, reason="latents packed as (batch, tokens, channels), ids per token"),
    "DiTTransformer2DModel": Tiny(dict(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
                                       num_layers=2, sample_size=16, patch_size=2, norm_num_groups=8,
                                       num_embeds_ada_norm=10),
                                  4, 16, lambda b, s, g: {**_timestep(b, s, g), "class_labels": torch.arange(b) % 10}),
    "PixArtTransformer2DModel": Tiny(dict(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
                                          num_layers=2, sample_size=16, patch_size=2, norm_num_groups=8,
                                          cross_attention_dim=16, caption_channels=32, use_additional_conditions=False),
                                     4, 16, _text(32)),
    "SanaTransformer2DModel": Tiny(dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8,
                                        num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=8,
                                        cross_attention_dim=16, caption_channels=32, mlp_ratio=2.0, sample_size=16,
                                        patch_size=1), 4, 16, _text(32)),
}


class _EntryPoint(torch.nn.Module):
    """Calls one method of a diffusers model with ``return_dict=False``; returns its tensors."""

    def __init__(self, model: torch.nn.Module, method: str):
        super().__init__()
        self.model, self.method = model, method

    def forward(self, sample: torch.Tensor, timestep=None, encoder_hidden_states=None, pooled_projections=None,
                img_ids=None, txt_ids=None, class_labels=None, controlnet_cond=None):
        given = dict(timestep=timestep, encoder_hidden_states=encoder_hidden_states,
                     pooled_projections=pooled_projections, img_ids=img_ids, txt_ids=txt_ids,
                     class_labels=class_labels, controlnet_cond=controlnet_cond)
        kwargs = {k: v for k, v in given.items() if v is not None}
        output = getattr(self.model, self.method)(sample, return_dict=False, **kwargs)
        if self.method == "encode":  # a DiagonalGaussianDistribution: its parameters
            output = (output[0].mean, output[0].std)
        flat = torch.utils._pytree.tree_leaves(output)  # ControlNet: a list of residuals and one more
        return tuple(t for t in flat if isinstance(t, torch.Tensor) and t.ndim > 0)


def _randomize_zero_parameters(model: torch.nn.Module, seed: int) -> None:
    """diffusers initializes some output projections to zero (ControlNet's residual convolutions,
    adaptive norms): every output would be zero and any export would match. They get small
    random values, as trained weights have."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.numel() and not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


def diffusers_classes() -> dict[str, str]:
    """``{entry point: class name}`` for every ModelMixin subclass of ``diffusers.models``.

    Autoencoders (classes with ``encode`` and ``decode``) give ``Class.encode`` and ``Class.decode``.
    """
    import diffusers.models as models
    from diffusers.models.modeling_utils import ModelMixin

    names = sorted({name for names in models._import_structure.values() for name in names})
    found: dict[str, str] = {}
    for name in names:
        try:
            obj = getattr(models, name)
        except Exception:  # noqa: BLE001 - a class whose optional dependency is missing
            continue
        if not inspect.isclass(obj) or not issubclass(obj, ModelMixin) or obj is ModelMixin:
            continue
        if hasattr(obj, "encode") and hasattr(obj, "decode"):
            found[f"{name}.encode"] = name
            found[f"{name}.decode"] = name
        else:
            found[name] = name
    return found


def build_diffusers_model(entry: str, shapes: str = "batch", seed: int = 0) -> ModelCase:
    """The tiny model of ``entry`` (a key of :func:`diffusers_classes`) and the inputs of a row."""
    import diffusers.models as models

    if shapes not in ("batch", "image"):
        raise ValueError(f"shapes must be 'batch' or 'image', got {shapes!r}.")
    if entry not in TINY:
        raise NotImplementedError(f"{entry}: no tiny configuration in fx2onnx.zoo.diffusers_models.TINY yet")
    tiny = TINY[entry]
    class_name = entry.split(".")[0]
    torch.manual_seed(seed)
    model = getattr(models, class_name)(**tiny.config).eval()
    _randomize_zero_parameters(model, seed)
    wrapped = _EntryPoint(model, tiny.method).eval()
    generator = torch.Generator().manual_seed(seed)
    side = tiny.side

    def first(batch: int, size: int) -> torch.Tensor:
        if tiny.packed:
            return torch.randn(batch, (size // 2) ** 2, tiny.channels, generator=generator)
        return torch.randn(batch, tiny.channels, size, size, generator=generator)

    check_side = side + 8 if shapes == "image" else side
    export_input, export_kwargs = first(2, side), tiny.kwargs(2, side, generator)
    check_input, check_kwargs = first(3, check_side), tiny.kwargs(3, check_side, generator)
    sample_dims = {0: "batch"}
    if shapes == "image":
        sample_dims = {0: "batch", 1: "tokens"} if tiny.packed else {0: "batch", 2: "height", 3: "width"}
    dynamic: dict[str, Any] = {"sample": sample_dims}
    for name, value in export_kwargs.items():
        dims = {0: "batch"} if value.ndim and value.shape[0] == 2 and name not in ("txt_ids",) else {}
        if name == "img_ids" and shapes == "image":
            dims = {0: "tokens"}
        elif name == "img_ids":
            dims = {}
        if name == "controlnet_cond" and shapes == "image":
            dims = {0: "batch", 2: "cond_height", 3: "cond_width"}
        dynamic[name] = dims or None
    return ModelCase(
        family=class_name, name=entry, model=wrapped, export_input=export_input, check_input=check_input,
        dynamic_shapes=dynamic,
        parameters=sum(p.numel() for p in model.parameters()), notes=[tiny.reason] if tiny.reason else [],
        export_kwargs=export_kwargs, check_kwargs=check_kwargs,
    )
