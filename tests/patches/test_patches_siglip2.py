"""SigLIP 2's position embeddings resized for the whole batch from sizes as tensors: eager's numbers."""

import pytest
import torch

from fx2onnx.patches.siglip2 import resize_positional_embeddings

siglip2 = pytest.importorskip("transformers.models.siglip2.modeling_siglip2")


@pytest.mark.parametrize("side,shapes,max_length", [
    (4, [[3, 5], [8, 2], [4, 4], [1, 1], [16, 16]], 256),  # enlarged, shrunk on one side, the table's own size
    (16, [[7, 9], [16, 16], [20, 12], [2, 30]], 256),  # shrunk (the antialiasing filter stretched), enlarged
    (3, [[2, 3]], 10),  # padding positions past h * w take the first position's embedding
])
def test_resized_embeddings_equal_eager(side, shapes, max_length):
    torch.manual_seed(0)
    table, sizes = torch.randn(side, side, 8), torch.tensor(shapes)
    expected = siglip2.Siglip2VisionEmbeddings.resize_positional_embeddings(table, sizes, max_length)
    got = resize_positional_embeddings(table, sizes, max_length)
    assert got.shape == (len(shapes), max_length, 8)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_the_patch_applies_while_exporting():
    from fx2onnx.patches import torch_export_patches

    original = siglip2.Siglip2VisionEmbeddings.resize_positional_embeddings
    with torch_export_patches(patch_transformers=True):
        patched = siglip2.Siglip2VisionEmbeddings.resize_positional_embeddings
        assert patched is not original and patched.__wrapped__ is original
    assert siglip2.Siglip2VisionEmbeddings.resize_positional_embeddings is original
