"""The benchmark Llama as a checkpoint holding a trained multi-token-prediction head.

transformers runs a multi-token-prediction (MTP) head for the classes whose checkpoints ship one (DeepSeek V3,
GLM-4-MoE, Step-3.7...), never for Llama. A GLM-4-MoE whose layers are all dense (``first_k_dense_replace`` past
the last layer), with the whole head rotated (``partial_rotary_factor=1``), no attention bias nor query/key norms,
is the Llama of ``trained_llama.py`` exactly (the same logits from the same weights). Its head, the layer after
the last one as released checkpoints hold it (``model.layers.<n>.*``: ``enorm``, ``hnorm``, ``eh_proj``, a decoder
layer, ``shared_head.norm``), starts from a copy of the last layer and is trained on the same corpus with the main
model frozen: at each position ``p`` it reads the model's last hidden state and the token at ``p + 1`` and
predicts the token at ``p + 2`` (transformers' ``MtpModel``, as ``generate(use_mtp=True)`` runs it). The head is
cached outside the repository beside the Llama's weights.

    python bench/trained_mtp.py [--quick] [--steps 120]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from trained_llama import Corpus, cache_path, trained_llama


def glm_config(llama_config, mtp_layers: int = 1):
    """The dense GLM-4-MoE config computing the Llama of ``llama_config``."""
    import transformers

    c = llama_config
    return transformers.Glm4MoeConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.hidden_size // c.num_attention_heads,
        partial_rotary_factor=1.0, attention_bias=False, use_qk_norm=False,
        # the main layers dense; the head's a mixture of experts, as MtpModel builds it: the shared expert
        # starts as the last layer's MLP, one of two routed experts a token
        first_k_dense_replace=c.num_hidden_layers, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
        moe_intermediate_size=c.intermediate_size, max_position_embeddings=512,
        rms_norm_eps=c.rms_norm_eps, rope_parameters=dict(c.rope_parameters), tie_word_embeddings=False,
        num_mtp_layers=mtp_layers, eos_token_id=2, pad_token_id=2)


def _mtp_logits(mtp, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """The head's logits at every position ``p`` of ``ids[:, 1:]`` and ``hidden[:, :-1]`` (no cache)."""
    from transformers.masking_utils import create_causal_mask

    embeds = mtp.embed_tokens(ids[:, 1:])
    position = torch.arange(1, ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
    mask = create_causal_mask(config=mtp.config, inputs_embeds=embeds, attention_mask=None, past_key_values=None,
                              position_ids=position)
    rotary = mtp.rotary_emb(embeds, position_ids=position)
    out = mtp.layers[0](embeds, hidden[:, :-1], position_embeddings=rotary, attention_mask=mask,
                        position_ids=position, past_key_values=None)
    return mtp._project_to_logits(out)


def write_mtp_checkpoint(folder: str, quick: bool = False, steps: int = 120, verbose: bool = False) -> dict:
    """Writes the GLM-4-MoE checkpoint of the trained benchmark Llama with its trained MTP head in ``folder``;
    returns the head's training record (loss, accuracy of the token at ``p + 2``)."""
    import transformers

    llama = trained_llama(quick=quick).model
    config = glm_config(llama.config)
    n = config.num_hidden_layers
    torch.manual_seed(0)
    whole = transformers.Glm4MoeConfig(**{**config.to_dict(), "num_hidden_layers": n + 1})
    model = transformers.Glm4MoeForCausalLM(whole).eval()
    state = llama.state_dict()
    for name, value in list(state.items()):  # the head's layer starts as a copy of the last one
        if name.startswith(f"model.layers.{n - 1}."):
            state[name.replace(f"layers.{n - 1}.", f"layers.{n}.").replace(".mlp.", ".mlp.shared_experts.")] = value
    missing = model.load_state_dict(state, strict=False).missing_keys
    assert all(k.startswith(f"model.layers.{n}.mlp.") for k in missing), missing
    cached = cache_path(quick, 0).replace("llama_", "mtp_head_").replace("steps0", f"steps{steps}")
    if os.path.exists(cached):
        head = torch.load(cached, weights_only=True)
    else:
        _save(model, folder, n, {})
        head = _train_head(folder, n, steps, verbose)
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        torch.save(head, cached + ".tmp")
        os.replace(cached + ".tmp", cached)
    _save(model, folder, n, head["weights"])
    return head["record"]


#: the head's tensors outside its decoder layer: MtpModel's name -> the checkpoint's (after model.layers.<n>.)
_EXTRAS = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
           "post_norm.weight": "shared_head.norm.weight"}


def _save(model, folder: str, n: int, trained: dict) -> None:
    """Saves ``model`` (the main layers and the head's decoder layer as layer ``n``) with the head's other
    tensors, ``trained`` (MtpModel's names) or a seeded initialization, then names ``n`` layers in config.json."""
    import transformers
    from safetensors.torch import load_file, save_file

    block = {f"model.layers.{n}.{k.split('mtp_block.', 1)[1]}": v for k, v in trained.items() if "mtp_block." in k}
    if block:
        model.load_state_dict(block, strict=False)
    model.save_pretrained(folder)
    transformers.GenerationConfig(eos_token_id=2, pad_token_id=2).save_pretrained(folder)
    path = os.path.join(folder, "model.safetensors")
    weights = load_file(path)
    g = torch.Generator().manual_seed(1)
    h = model.config.hidden_size
    for name in ("enorm", "hnorm", "shared_head.norm"):
        weights[f"model.layers.{n}.{name}.weight"] = 1 + 0.01 * torch.randn(h, generator=g)
    weights[f"model.layers.{n}.eh_proj.weight"] = 0.02 * torch.randn(h, 2 * h, generator=g)
    for name, value in trained.items():
        if "mtp_block." not in name:
            weights[f"model.layers.{n}.{_EXTRAS[name.split('.', 2)[2]]}"] = value
    save_file(weights, path, metadata={"format": "pt"})
    _write_config(folder, n)


def _write_config(folder: str, layers: int) -> None:
    """config.json names the main model's layers only: the head's is read by MtpModel."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        stored = json.load(f)
    stored["num_hidden_layers"] = layers
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(stored, f, indent=1)


def _train_head(folder: str, n: int, steps: int, verbose: bool) -> dict:
    """Trains the head of the checkpoint ``folder`` (main model frozen); returns its record (loss, accuracy of
    the token at ``p + 2``) and trained tensors (MtpModel's names)."""
    import transformers
    from transformers.modeling_layers import MtpModel

    cls = transformers.Glm4MoeForCausalLM
    saved = cls._keys_to_ignore_on_load_unexpected
    cls._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{n}\..*"]
    try:
        main = cls.from_pretrained(folder, dtype=torch.float32).eval()
        mtp = MtpModel.from_pretrained(main)
    finally:
        cls._keys_to_ignore_on_load_unexpected = saved
    main.requires_grad_(False)
    own = {name: p for name, p in mtp.named_parameters()
           if not name.startswith(("embed_tokens", "shared_head.")) or name.startswith("shared_head.norm")}
    own = {name: p for name, p in own.items() if p.requires_grad and p.data_ptr() not in
           {q.data_ptr() for q in main.parameters()}}
    corpus = Corpus(main.config.vocab_size)
    optimizer = torch.optim.AdamW(own.values(), lr=2e-3, weight_decay=0.0, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + np.cos(np.pi * min(1.0, s / steps))))
    mtp.train()
    main.eval()
    losses, begin = [], time.perf_counter()
    for step in range(steps):
        ids = corpus.sample(8, 64, seed=50_000 + step)
        with torch.no_grad():
            hidden = main.model(ids).last_hidden_state
        logits = _mtp_logits(mtp, ids, hidden)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 2:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(own.values(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if verbose and (step % 20 == 0 or step == steps - 1):
            print(f"head step {step:4d} loss {losses[-1]:.3f} ({time.perf_counter() - begin:.0f} s)", flush=True)
    mtp.eval()
    ids = corpus.sample(8, 64, seed=99)
    with torch.no_grad():
        hidden = main.model(ids).last_hidden_state
        accuracy = float((_mtp_logits(mtp, ids, hidden)[:, :-1].argmax(-1) == ids[:, 2:]).float().mean())
    record = {"steps": steps, "loss": float(np.mean(losses[-10:])), "accuracy_p2": accuracy,
              "seconds": time.perf_counter() - begin}
    return {"record": record, "weights": {name: p.detach().clone() for name, p in own.items()}}


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        print(write_mtp_checkpoint(tmp, args.quick, args.steps, verbose=True))
