"""Weight-only quantization: ``MatMul`` / ``Gemm`` by a constant weight into
onnxruntime's ``com.microsoft.MatMulNBits``, the embedding ``Gather`` into
``com.microsoft.GatherBlockQuantized`` (optional: it saves bytes, not time), the 3D tables of
the routed experts of a mixture of experts (gathered by expert, then multiplied) into
``GatherBlockQuantized`` too.

A weight ``W [K, N]`` is cut into blocks of ``block_size`` values along ``K`` (``K`` padded
with zeros to a multiple of the block), one scale (and one zero point) per block and
output column. Asymmetric blocks, onnxruntime's quantizer's default: the range
``[min(w, 0), max(w, 0)]`` of a block is mapped onto the codes ``0 .. 2**bits - 1``,
``scale = (max - min) / (2**bits - 1)``, ``zero_point = round(-min / scale)``,
``code = clip(round(w / scale) + zero_point)``; dequantized as ``(code - zero_point) * scale``,
a value is off by at most half a step (``scale / 2``). Symmetric blocks (no zero point
stored, onnxruntime's default one ``2**(bits - 1)``): ``scale = m / -2**(bits - 1)`` where
``m`` is the value of largest magnitude of the block, so that ``m`` takes the code 0.

Layouts (``MatMulNBits``): ``B`` uint8 ``[N, n_blocks, block_size * bits / 8]``, two 4-bit
codes a byte, the first in the low nibble; ``scales [N, n_blocks]`` of the activation's type;
``zero_points`` uint8 ``[N, ceil(n_blocks * bits / 8)]`` packed the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import onnx_ir as ir

from ._graph import _names, attr, ensure_opset, initializer, replace, users
from .quantize_lazy import lazy_parts

#: the ``quantize=`` values and their number of bits
QUANTIZE_BITS = {"int4": 4, "int8": 8}
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
#: MatMulNBits' accuracy_level used by ``optimize(quantize=...)``: 4 lets the kernel quantize the
#: activations to int8 by block; onnxruntime 1.31 has no fast float path for 8-bit weights
#: (benchmark Llama decode step, 1 thread: int8 440 ms at level 0, 15.5 ms at 4; int4 15.9 and 14.7 ms)
ACCURACY_LEVEL = 4


@dataclasses.dataclass
class QuantizedWeight:
    """One weight replaced by blocks: the node, its weight's shape and the bytes before and after
    (weight only before; codes, scales and zero points after)."""

    #: the name of the node using the weight
    node: str
    #: the op type replacing it (``MatMulNBits``, ``GatherBlockQuantized``)
    op_type: str
    #: the name of the initializer replaced
    weight: str
    #: the shape of the weight
    shape: tuple[int, ...]
    #: the bits of a code, 4 or 8
    bits: int
    #: the number of weights sharing one scale and one zero point
    block_size: int
    #: the bytes of the weight
    bytes_before: int
    #: the bytes of its codes, scales and zero points
    bytes_after: int

    def __str__(self) -> str:
        shape = "x".join(map(str, self.shape))
        return (f"{self.node} -> {self.op_type} (int{self.bits}, block {self.block_size}): {self.weight} [{shape}] "
                f"{self.bytes_before / 2**10:.1f} KiB -> {self.bytes_after / 2**10:.1f} KiB")


def check_quantize_options(quantize: str, block_size: int) -> int:
    """The number of bits of ``quantize``; a clear ValueError for a bad value or block size."""
    if quantize not in QUANTIZE_BITS:
        raise ValueError(f"Unknown quantize={quantize!r}: use one of {list(QUANTIZE_BITS)} (or None for float weights).")
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size={block_size!r} is not valid: MatMulNBits takes a power of two >= 16 (32 by default).")
    return QUANTIZE_BITS[quantize]


def quantize_blocks(
    weight: np.ndarray, bits: int = 4, block_size: int = 32, symmetric: bool = False, axis: Literal[0, 1] = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Quantizes a 2D weight by blocks along ``axis`` (0: ``W [K, N]`` of a MatMul, the blocks
    along K; 1: ``E [V, H]`` of an embedding, the blocks along H).

    :return: ``(codes, scales, zero_points)``: the unpacked codes (uint8) and float32 scales and
        zero points (uint8, None when symmetric) of shape ``[rows, n_blocks, block_size]`` and
        ``[rows, n_blocks]``, rows being N (axis 0) or V (axis 1); the reduced axis is padded with
        zeros to a multiple of ``block_size``
    """
    import torch

    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"quantize_blocks takes a 2D weight, got shape {w.shape}.")
    # computed with torch (its copies of transposed matrices are blocked and threaded, numpy's
    # transposition of the codes took most of the time) in the layout of the codes: one row per
    # output column, the blocks along it; the same float32 operations as onnxruntime's quantizer
    rows = torch.from_numpy(w)
    rows = rows.T if axis == 0 else rows
    count, reduced = rows.shape
    n_blocks = -(-reduced // block_size)
    codes = torch.empty((count, n_blocks, block_size), dtype=torch.uint8)
    scales = torch.empty((count, n_blocks), dtype=torch.float32)
    zero = torch.empty((count, n_blocks), dtype=torch.float32)
    # rows by chunks of QUANTIZE_CHUNK values: the temporaries are one chunk, not a copy of the weight
    # (a 256000 x 2304 table took three float32 copies of 2.4 GB); the same operations on each value
    step = max(1, QUANTIZE_CHUNK // (n_blocks * block_size))
    for begin in range(0, count, step):
        end = min(count, begin + step)
        codes[begin:end], scales[begin:end], zero[begin:end] = _quantize_rows(
            rows[begin:end], bits, block_size, n_blocks, symmetric)
    return codes.numpy(), scales.numpy(), None if symmetric else zero.to(torch.uint8).numpy()


#: values quantized at once by :func:`quantize_blocks` (64 MB of float32)
QUANTIZE_CHUNK = 2**24


def _quantize_rows(rows, bits: int, block_size: int, n_blocks: int, symmetric: bool):
    """(codes, scales, zero points) of the rows of a torch float32 matrix, blocks along each row."""
    import torch

    reduced = rows.shape[1]
    if n_blocks * block_size != reduced:
        rows = torch.nn.functional.pad(rows, (0, n_blocks * block_size - reduced))
    blocks = rows.contiguous().view(rows.shape[0], n_blocks, block_size)
    qmax = (1 << bits) - 1
    low, high = blocks.amin(dim=-1), blocks.amax(dim=-1)
    if symmetric:
        mid = 1 << (bits - 1)
        largest = torch.where(high.abs() > low.abs(), high, low)
        scales = largest / torch.tensor(-mid, dtype=torch.float32)
        zero = torch.full_like(scales, mid)
    else:
        low.clamp_(max=0)
        high.clamp_(min=0)
        scales = (high - low) / torch.tensor(qmax, dtype=torch.float32)
        zero = torch.where(scales != 0, torch.floor(-low / scales + 0.5).clamp_(0, qmax), 0.0)
    inverse = torch.where(scales != 0, 1.0 / scales, 0.0)
    # code = floor(w / scale + zero + 0.5) clipped, in place
    values = blocks * inverse[..., None]
    values += (zero + 0.5)[..., None]
    values.floor_().clamp_(0, qmax)
    return values.to(torch.uint8), scales, zero


def pack_codes(codes: np.ndarray, bits: int, pad: int = 0) -> np.ndarray:
    """Packs uint8 codes along the last axis, ``8 // bits`` a byte, the first in the low bits
    (an odd count is padded with ``pad``: onnxruntime pads the zero points with the default one)."""
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8)
    if bits != 4:
        raise ValueError(f"bits={bits}: only 4 and 8 are packed here.")
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.full(codes.shape[:-1] + (1,), pad, np.uint8)], axis=-1)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4), dtype=np.uint8)


def unpack_codes(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The inverse of :func:`pack_codes`: the first ``count`` codes of the last axis."""
    if bits == 8:
        return packed[..., :count]
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[:-1] + (-1,))
    return codes[..., :count]


def dequantize_matmul_weight(
    packed: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, bits: int, k: int
) -> np.ndarray:
    """The float weight ``[K, N]`` a ``MatMulNBits`` computes with (to check a quantization)."""
    n, n_blocks, _ = packed.shape
    block_size = packed.shape[2] * 8 // bits
    codes = unpack_codes(packed, bits, block_size).astype(np.float32)
    scales = np.asarray(scales, np.float32).reshape(n, n_blocks)
    if zero_points is None:
        zero = np.full((n, n_blocks), 1 << (bits - 1), np.float32)
    else:
        zero = unpack_codes(np.asarray(zero_points).reshape(n, -1), bits, n_blocks).astype(np.float32)
    w = (codes - zero[..., None]) * scales[..., None]
    return w.reshape(n, n_blocks * block_size)[:, :k].T


def quantize_matmuls(
    model: ir.Model,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = False,
    accuracy_level: int = 0,
    report: list[QuantizedWeight] | None = None,
    heads: dict[str, tuple[ir.Value, ir.Value, ir.Value | None]] | None = None,
) -> int:
    """Replaces every ``MatMul`` (and ``Gemm``) whose second input is a constant 2D float weight
    by a ``com.microsoft.MatMulNBits``; a following ``Add`` of a constant ``[N]`` bias (or the
    ``C`` of a Gemm) becomes its bias. Returns the number of nodes replaced; ``report`` (a list)
    receives one :class:`QuantizedWeight` per node; ``heads`` (a dict) receives the codes, scales
    and zero points of each table read transposed (a tied head: ``MatMul(x, Transpose(table))``)
    by the table's name, for :func:`quantize_gathers` to share them."""
    graph = model.graph
    count = 0
    cache: dict[tuple[int, bool], tuple[ir.Value, ir.Value, ir.Value | None]] = {}
    taken = _names(graph)

    def unique(name: str) -> str:
        i, found = 0, name
        while found in taken:
            i += 1
            found = f"{name}_{i}"
        taken.add(found)
        return found

    for node in [n for n in graph if n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx")]:
        found = _weight_of(node)
        if found is None:
            continue
        w_value, transposed, bias, bias_add = found
        rows, columns = w_value.const_value.shape
        k, n = (columns, rows) if transposed else (rows, columns)
        a = node.inputs[0]
        dtype = a.dtype or w_value.dtype
        key = (id(w_value), transposed)
        base = w_value.name or "weight"
        if key not in cache:
            b_value, s_value, z_value = _quantized_initializers(
                graph, w_value.const_value, transposed, (k, n), ir.DataType(dtype), bits, block_size, symmetric,
                [unique(f"{base}_{suffix}") for suffix in (f"q{bits}", "scales", "zero_points")[: 2 + (not symmetric)]],
            )
            cache[key] = (b_value, s_value, z_value)
            if transposed and heads is not None and node.op_type == "MatMul" and w_value.name:
                heads[w_value.name] = cache[key]
        b_value, s_value, z_value = cache[key]
        inputs: list[ir.Value | None] = [a, b_value, s_value, z_value]
        if bias is not None:
            inputs += [None, bias]
        attributes = {"K": k, "N": n, "bits": bits, "block_size": block_size}
        if accuracy_level:
            attributes["accuracy_level"] = accuracy_level
        while inputs[-1] is None:
            inputs.pop()
        new = ir.node("MatMulNBits", inputs, attributes, domain="com.microsoft", name=f"{node.name or base}_Q{bits}")
        replaced = bias_add.outputs[0] if bias_add is not None else node.outputs[0]
        replace(graph, node, [new], [replaced], list(new.outputs), metadata_from=node)
        count += 1
        if report is not None:
            after = sum(v.const_value.nbytes for v in (b_value, s_value, z_value) if v is not None)
            before = w_value.const_value.nbytes
            report.append(QuantizedWeight(node.name or "", "MatMulNBits", base, (k, n), bits, block_size, before, after))
    if count:
        ensure_opset(model, "com.microsoft", 1)
    return count


def _quantized_initializers(
    graph: ir.Graph, weight: ir.TensorProtocol, transposed: bool, kn: tuple[int, int], dtype: ir.DataType, bits: int,
    block_size: int, symmetric: bool, names: list[str],
) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """The codes, scales (of ``dtype``) and zero points (None when symmetric) of ``weight`` as
    initializers named ``names``: computed now, or, for a lazy weight (a checkpoint read on
    demand), lazy initializers computing them when saved, one weight at a time
    (:mod:`fx2onnx.optimizer.rules.quantize_lazy`)."""

    np_type = dtype.numpy()
    parts = ("codes", "scales", "zero_points")[: len(names)]

    def compute() -> dict[str, np.ndarray]:
        array = weight.numpy()
        codes, scales, zero = quantize_blocks(array.T if transposed else array, bits, block_size, symmetric)
        values = {"codes": pack_codes(codes, bits), "scales": scales.astype(np_type)}
        if zero is not None:
            values["zero_points"] = pack_codes(zero, bits, pad=1 << (bits - 1))
        return values

    if not isinstance(weight, ir.LazyTensor):
        values = compute()
        made = [initializer(graph, name, values[part]) for part, name in zip(parts, names)]
    else:
        k, n = kn
        n_blocks = -(-k // block_size)
        shapes = {"codes": ((n, n_blocks, block_size * bits // 8), ir.DataType.UINT8), "scales": ((n, n_blocks), dtype),
                  "zero_points": ((n, -(-n_blocks * bits // 8)), ir.DataType.UINT8)}
        lazy = lazy_parts(compute, {part: shapes[part] for part in parts}, dict(zip(parts, names)))
        made = []
        for part, name in zip(parts, names):
            value = ir.Value(name=name, shape=lazy[part].shape, type=ir.TensorType(lazy[part].dtype),
                             const_value=lazy[part])
            graph.register_initializer(value)
            made.append(value)
    return made[0], made[1], made[2] if len(made) > 2 else None


def quantize_gathers(
    model: ir.Model,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = False,
    report: list[QuantizedWeight] | None = None,
    tables: set[str] | None = None,
    heads: dict[str, tuple[ir.Value, ir.Value, ir.Value | None]] | None = None,
) -> int:
    """Replaces every ``Gather`` of rows of a constant 2D float table (an embedding) by a
    ``com.microsoft.GatherBlockQuantized``: blocks along the rows (``quantize_axis=1``), codes
    stored as uint4 (int4) or uint8 (int8), zero points always stored (also when symmetric).
    ``tables``: only the 2D tables of these names. Returns the number of nodes replaced.

    A 3D table ``[experts, ., .]`` gathered by expert index and multiplied (the routed experts of
    a mixture of experts) is always replaced (:func:`_quantize_experts`): it is a MatMul's weight.

    ``heads``: the blocks :func:`quantize_matmuls` made for tied heads (by table name). A table
    found there is not quantized twice: the head's ``MatMulNBits`` codes ``[N, n_blocks, bytes]``
    hold the rows of the table one after the other, the layout ``GatherBlockQuantized`` reads as
    uint8 ``[N, K * bits / 8]`` (packed codes, low nibble first, zero points packed the same way),
    so the Gather reads them through a ``Reshape`` and one copy of the table is stored."""
    import ml_dtypes

    graph = model.graph
    taken = _names(graph)
    count = 0
    for node in [n for n in graph if n.op_type == "Gather" and n.domain in ("", "ai.onnx")]:
        if _share_head_blocks(graph, node, heads or {}, bits, block_size, report):
            count += 1
            continue
        table = node.inputs[0]
        tensor = table.const_value if table is not None else None
        if tensor is not None and len(tensor.shape) == 3 and tensor.dtype in _FLOATS:
            if _quantize_experts(graph, node, bits, block_size, symmetric, taken, report):
                count += 1
            continue
        if tensor is None or len(tensor.shape) != 2 or tensor.dtype not in _FLOATS:
            continue
        if tables is not None and table.name not in tables:
            continue
        if attr(node, "axis", 0) not in (0, -2):
            continue
        if node.inputs[1] is None or node.inputs[1].const_value is not None:
            continue  # constant indices: folded elsewhere, nothing to gain
        array = tensor.numpy()
        rows, width = array.shape
        codes, scales, zero = quantize_blocks(array, bits, block_size, symmetric, axis=1)
        flat = codes.reshape(rows, -1)[:, :width]
        code_type = ml_dtypes.uint4 if bits == 4 else np.uint8
        base = table.name or "embedding"
        names = []
        for suffix in (f"q{bits}", "scales", "zero_points"):
            i, name = 0, f"{base}_{suffix}"
            while name in taken:
                i += 1
                name = f"{base}_{suffix}_{i}"
            taken.add(name)
            names.append(name)
        data = initializer(graph, names[0], flat.astype(code_type))
        s_value = initializer(graph, names[1], scales.astype(ir.DataType(tensor.dtype).numpy()))
        z_value = initializer(graph, names[2], zero.astype(code_type))
        attributes = {"gather_axis": 0, "quantize_axis": 1, "block_size": block_size, "bits": bits}
        new = ir.node("GatherBlockQuantized", [data, node.inputs[1], s_value, z_value], attributes,
                      domain="com.microsoft", name=f"{node.name or base}_Q{bits}")
        replace(graph, node, [new], [node.outputs[0]], list(new.outputs), metadata_from=node)
        count += 1
        if report is not None:
            after = (flat.size * bits + 7) // 8 + s_value.const_value.nbytes + (zero.size * bits + 7) // 8
            report.append(QuantizedWeight(node.name or "", "GatherBlockQuantized", base, (rows, width), bits, block_size,
                                          tensor.nbytes, after))
    if count:
        ensure_opset(model, "com.microsoft", 1)
    return count


def _quantize_experts(
    graph: ir.Graph, node: ir.Node, bits: int, block_size: int, symmetric: bool, taken: set[str],
    report: list[QuantizedWeight] | None,
) -> bool:
    """Replaces ``Gather(table [E, A, B], experts, axis=0)`` whose result is only multiplied
    (``MatMul``) by a ``GatherBlockQuantized`` (onnxruntime dequantizes the experts it gathers):
    blocks along the last axis, codes packed in uint8 ``[E, A, B * bits / 8]`` (low nibble first),
    scales ``[E, A, ceil(B / block_size)]``, zero points uint8 packed the same way (none when
    symmetric: onnxruntime's default ``2 ** (bits - 1)``). onnxruntime 1.31 blocks uint8 codes
    along the last axis only, and runs its uint4 type three times slower than packed uint8
    (64 experts of 1024 x 704, 8 gathered, one thread: 120 ms against 36 ms, float32 11 ms).
    A lazy table (a checkpoint) is quantized when saved, one table at a time, one expert at a
    time. False when the Gather is not such a node (or 4-bit codes of an odd last axis)."""
    table, indices = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    tensor = table.const_value
    if attr(node, "axis", 0) not in (0, -3) or indices is None or indices.const_value is not None:
        return False
    out = node.outputs[0]
    following = users(out)
    if not following or out in graph.outputs or any(n.op_type != "MatMul" or n.domain not in ("", "ai.onnx")
                                                    for n in following):
        return False
    experts, a, b = tensor.shape
    if (b * bits) % 8:
        return False
    n_blocks = -(-b // block_size)
    scale_type = ir.DataType(tensor.dtype)
    mid = 1 << (bits - 1)
    shapes = {"codes": ((experts, a, b * bits // 8), ir.DataType.UINT8), "scales": ((experts, a, n_blocks), scale_type),
              "zero_points": ((experts, a, -(-n_blocks * bits // 8)), ir.DataType.UINT8)}
    if symmetric:
        del shapes["zero_points"]
    table_array: list[np.ndarray] = []

    def compute() -> dict[str, np.ndarray]:
        values = {part: np.empty(shape, dtype.numpy()) for part, (shape, dtype) in shapes.items()}
        array = table_array[0] if table_array else tensor.numpy()
        for e in range(experts):  # an expert at a time: the temporaries of one matrix
            matrix = np.array(array[e], np.float32)  # a copy: torch reads it, not the read-only table
            codes, scales, zero = quantize_blocks(matrix, bits, block_size, symmetric, axis=1)
            values["codes"][e] = pack_codes(codes.reshape(a, -1)[:, :b], bits)
            values["scales"][e] = scales
            if zero is not None:
                values["zero_points"][e] = pack_codes(zero, bits, pad=mid)
        return values

    base = table.name or "experts"
    names = []
    for suffix in (f"q{bits}", "scales", "zero_points")[: len(shapes)]:
        i, name = 0, f"{base}_{suffix}"
        while name in taken:
            i += 1
            name = f"{base}_{suffix}_{i}"
        taken.add(name)
        names.append(name)
    if isinstance(tensor, ir.LazyTensor):

        def compute_lazy() -> dict[str, np.ndarray]:
            table_array.append(tensor.numpy())  # the table read once, dropped once quantized
            try:
                return compute()
            finally:
                table_array.clear()

        lazy = lazy_parts(compute_lazy, shapes, dict(zip(shapes, names)))
        made = []
        for part, name in zip(shapes, names):
            value = ir.Value(name=name, shape=lazy[part].shape, type=ir.TensorType(lazy[part].dtype),
                             const_value=lazy[part])
            graph.register_initializer(value)
            made.append(value)
    else:
        values = compute()
        made = [initializer(graph, name, values[part]) for part, name in zip(shapes, names)]
    attributes = {"gather_axis": 0, "quantize_axis": 2, "block_size": block_size, "bits": bits}
    new = ir.node("GatherBlockQuantized", [made[0], indices, *made[1:]], attributes,
                  domain="com.microsoft", name=f"{node.name or base}_Q{bits}")
    replace(graph, node, [new], [out], list(new.outputs), metadata_from=node)
    if report is not None:
        after = sum(int(np.prod(shape)) * int(dtype.itemsize) for shape, dtype in shapes.values())
        report.append(QuantizedWeight(node.name or "", "GatherBlockQuantized", base, (experts, a, b), bits,
                                      block_size, tensor.nbytes, after))
    return True


def _share_head_blocks(
    graph: ir.Graph, node: ir.Node, heads: dict[str, tuple[ir.Value, ir.Value, ir.Value | None]], bits: int,
    block_size: int, report: list[QuantizedWeight] | None,
) -> bool:
    """Replaces the Gather of a table a head was quantized from by a GatherBlockQuantized reading the
    head's blocks (see :func:`quantize_gathers`); False when it cannot (the table's width is not a
    multiple of the block, constant indices)."""
    table = node.inputs[0]
    if table is None or table.name not in heads or table.const_value is None:
        return False
    if attr(node, "axis", 0) not in (0, -2) or node.inputs[1] is None or node.inputs[1].const_value is not None:
        return False
    codes, scales, zero = heads[table.name]
    rows, width = table.const_value.shape
    if width % block_size or scales.dtype != table.dtype:
        return False
    shape = initializer(graph, f"{codes.name}_rows_shape", np.array([rows, width * bits // 8], dtype=np.int64))
    reshape = ir.node("Reshape", [codes, shape], name=f"{node.name or table.name}_rows")
    attributes = {"gather_axis": 0, "quantize_axis": 1, "block_size": block_size, "bits": bits}
    # symmetric blocks: no zero points, GatherBlockQuantized's default for uint8 codes is the same
    # as MatMulNBits' (2 ** (bits - 1))
    inputs = [reshape.outputs[0], node.inputs[1], scales] + ([] if zero is None else [zero])
    new = ir.node("GatherBlockQuantized", inputs, attributes,
                  domain="com.microsoft", name=f"{node.name or table.name}_Q{bits}")
    replace(graph, node, [reshape, new], [node.outputs[0]], list(new.outputs), metadata_from=node)
    if report is not None:  # no byte of its own: the head's blocks
        report.append(QuantizedWeight(node.name or "", "GatherBlockQuantized", table.name, (rows, width), bits,
                                      block_size, table.const_value.nbytes, 0))
    return True


def _weight_of(node: ir.Node) -> tuple[ir.Value, bool, ir.Value | None, ir.Node | None] | None:
    """(weight, transposed, bias, the Add folded as the bias) of a MatMul / Gemm the rule can
    replace, None otherwise."""
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[0].dtype not in _FLOATS:
        return None
    w = node.inputs[1]
    tensor = w.const_value if w is not None else None
    head_transposed = False
    if tensor is None and node.op_type == "MatMul" and w is not None and w.producer() is not None:
        # MatMul(x, Transpose(table)): a tied head, the table shared with an embedding's Gather, so
        # the transposition is not folded into a second copy; the table is the weight, transposed
        t = w.producer()
        source = t.inputs[0] if t.op_type == "Transpose" and t.domain in ("", "ai.onnx") and t.inputs else None
        if source is not None and source.const_value is not None and list(attr(t, "perm", [1, 0])) == [1, 0]:
            w, tensor, head_transposed = source, source.const_value, True
    if tensor is None or len(tensor.shape) != 2 or tensor.dtype != node.inputs[0].dtype:
        return None
    array_shape = tuple(tensor.shape)
    a_rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else None
    if node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
            return None
        transposed = bool(attr(node, "transB", 0))
        n = array_shape[0] if transposed else array_shape[1]
        c = node.inputs[2] if len(node.inputs) > 2 else None
        if c is None:
            return w, transposed, None, None
        bias = _bias(c, n, node.inputs[0].dtype)
        return None if bias is None else (w, transposed, bias, None)
    if a_rank is None or a_rank < 2:
        return None
    # a following Add of a constant [N] becomes the bias (adding a vector keeps the shape)
    out = node.outputs[0]
    following = users(out)
    add = following[0] if len(following) == 1 and out not in node.graph.outputs else None
    if add is not None and add.op_type == "Add" and add.domain in ("", "ai.onnx"):
        other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
        bias = _bias(other, array_shape[0] if head_transposed else array_shape[1], node.inputs[0].dtype)
        if bias is not None:
            return w, head_transposed, bias, add
    return w, head_transposed, None, None


def _bias(value: ir.Value | None, n: int, dtype: ir.DataType | None) -> ir.Value | None:
    """``value`` if it is a constant vector ``[N]`` of the activation's type (MatMulNBits' bias)."""
    if value is None or value.const_value is None or value.dtype != dtype:
        return None
    return value if tuple(value.const_value.shape) == (n,) else None
