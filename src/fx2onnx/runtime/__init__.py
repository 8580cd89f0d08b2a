"""Running exported models: greedy generation with the cache kept in onnxruntime memory."""

from __future__ import annotations

from .generate import CacheSignature, GenerationTimes, OnnxGenerator, generate

__all__ = ["CacheSignature", "GenerationTimes", "OnnxGenerator", "generate"]
