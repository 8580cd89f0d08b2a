"""The registry of the families a folder is exported as, and the runtime's registry of their loops."""

import json

import pytest

from fx2onnx.deploy.families import FAMILIES, FolderFacts, choose_family
from fx2onnx.runtime.families import GENERATORS, generator_class, open_generator


def _facts(task, model_type="m", encoder_decoder=False, audio=None, image=None, prefix=False):
    return FolderFacts(task, model_type, encoder_decoder, audio, image, image_prefix=prefix)


@pytest.mark.parametrize("facts, name", [
    (_facts("speech-seq2seq", "whisper", encoder_decoder=True), "Whisper"),
    (_facts("speech-seq2seq", "speech_to_text", encoder_decoder=True), "speech encoder-decoder"),
    (_facts("speech-seq2seq", "granite_speech", audio=5), "speech language model"),
    (_facts("image-text-to-text", "git", prefix=True), "image prefix"),
    (_facts("image-text-to-text", "vision-encoder-decoder", encoder_decoder=True), "image encoder-decoder"),
    (_facts("image-text-to-text", "llava", image=32000), "image-text"),
    (_facts("text-generation", "llama"), "decoder"),
])
def test_the_first_family_that_applies(facts, name):
    assert choose_family(facts).name == name


def test_a_task_without_family_is_refused_in_one_line():
    with pytest.raises(ValueError, match="no family of pieces takes it"):
        choose_family(_facts("visual-question-answering"))


def test_every_family_has_a_loop_and_every_loop_a_family():
    for family in FAMILIES:
        cls = generator_class(family.task, family.split)
        assert f"{cls.__module__}.{cls.__name__}" == family.runtime
    assert set(GENERATORS) == {(f.task, f.split) for f in FAMILIES}


def test_text_generation_is_a_family_writing_its_folder():
    (family,) = [f for f in FAMILIES if f.task == "text-generation"]
    assert family.export is None and family.write_folder.__module__ == "fx2onnx.deploy.text_generation"


def test_a_folder_of_an_unknown_split_is_refused(tmp_path):
    (tmp_path / "fx2onnx.json").write_text(json.dumps({"task": "image-text-to-text", "split": "mosaic"}))
    with pytest.raises(ValueError, match="No loop runs a folder of task 'image-text-to-text' split 'mosaic'"):
        open_generator(tmp_path)
    with pytest.raises(ValueError, match="not 'speech-seq2seq'"):
        open_generator(tmp_path, task="speech-seq2seq")


def test_the_summary_names_the_family_and_the_quantized_matrices():
    import torch

    from fx2onnx.deploy.export import FolderExport

    folder = FolderExport("out", "image-text-to-text", torch.float32, [], 0, 1.0, 0, [], None,
                          family="image encoder-decoder", quantize="int4")
    assert "(image-text-to-text: image encoder-decoder, int4 matrices, float32 elsewhere)" in str(folder)
    assert FolderExport("out", "text-generation", torch.bfloat16, [], 0, 1.0, 0, [], None).kind() == \
        "text-generation, bfloat16"
