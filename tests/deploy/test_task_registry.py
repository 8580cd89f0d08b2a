"""The tasks of several pieces or of their own post-processing (mask generation, text to audio, table and document
question answering, DETR's panoptic segmentation) in the registries: read from config.json, a family exporting them,
a pipeline class running them; the model types a family does not take refused in one line (no export)."""

import numpy as np
import pytest
import torch
import transformers

from fx2onnx.deploy.families import FolderFacts, choose_family
from fx2onnx.deploy.tasks import EXPORTABLE_TASKS, folder_task
from fx2onnx.deploy.text_to_audio import export_text_to_audio_pieces
from fx2onnx.runtime.families import generator_class
from fx2onnx.runtime.pipelines import OWN_PIPELINES
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.runtime.text_to_audio import write_wav


@pytest.mark.parametrize("architecture, task, family", [
    ("SamModel", "mask-generation", "SAM"),
    ("VitsModel", "text-to-audio", "waveform"),
    ("TapasForQuestionAnswering", "table-question-answering", "table"),
    ("LayoutLMForQuestionAnswering", "document-question-answering", "words and boxes"),
    ("DetrForSegmentation", "universal-segmentation", "DETR segmenter"),
    ("MaskFormerForInstanceSegmentation", "universal-segmentation", "encoder"),
])
def test_the_task_and_family_of_a_folder(architecture, task, family):
    config = transformers.AutoConfig.for_model(
        {"SamModel": "sam", "VitsModel": "vits", "TapasForQuestionAnswering": "tapas",
         "LayoutLMForQuestionAnswering": "layoutlm", "DetrForSegmentation": "detr",
         "MaskFormerForInstanceSegmentation": "maskformer"}[architecture], architectures=[architecture])
    assert folder_task(config) == task
    chosen = choose_family(FolderFacts(task, config.model_type, False, None, None))
    assert chosen.name == family and generator_class(task, chosen.split) is not None


def test_every_own_pipeline_is_exported_and_run():
    for task, (_, path) in OWN_PIPELINES.items():
        assert task in EXPORTABLE_TASKS
        assert generator_class(task).__name__ == path.rpartition(".")[2]


def test_a_text_to_audio_model_of_another_type_is_refused_in_one_line(tmp_path):
    config = transformers.FastSpeech2ConformerConfig(architectures=["FastSpeech2ConformerModel"])
    with pytest.raises(ValueError, match=r"supports \['vits'\].*\['speecht5'\].*\['musicgen'\]") as error:
        export_text_to_audio_pieces(str(tmp_path), str(tmp_path / "out"), config, torch.float32, {"opset": None})
    assert "\n" not in str(error.value)


def test_a_waveform_written_as_wav_reads_back(tmp_path):
    audio = np.sin(np.linspace(0, 200, 1600, dtype=np.float32)) * 0.5
    path = write_wav(tmp_path / "a.wav", audio, 16000)
    np.testing.assert_allclose(read_wav(path, 16000), audio, atol=2 / 32767)
