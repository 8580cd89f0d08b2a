"""A video classifier's folder (VideoMAE) exported with no flag and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx
run --video``: what transformers' video-classification pipeline returns on the same clip (the frames sampled by the
folder's video processor), the clip given as frames, a ``.npy`` array, a folder of images or a video file (PyAV)."""

import json

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.encoder_folder import write_encoder_folder
from test_encoder_tasks import _reference, _same


def _mp4(path, frames):
    """Writes ``frames`` (frames, height, width, 3) as an MPEG-4 file with PyAV."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=8)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return str(path)


@pytest.mark.slow
def test_video_classification_equals_transformers(tmp_path_factory, tmp_path, capsys):
    import PIL.Image

    root = tmp_path_factory.mktemp("video")
    checkpoint = write_encoder_folder("VideoMAEForVideoClassification", root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.task == "video-classification", result.check_lines()
    out, checkpoint = str(root / "out"), str(checkpoint)
    rng = np.random.default_rng(3)
    clips = [rng.integers(0, 256, (8, 40, 48, 3), dtype=np.uint8), rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)]
    ours, reference = fx2onnx.pipeline(out), _reference("video-classification", checkpoint)
    _same(ours(clips), reference(clips))
    _same(ours(clips[0], top_k=2), reference(clips[0], top_k=2))
    # the same clip as a .npy file, a folder of frames, an MPEG-4 file
    np.save(tmp_path / "clip.npy", clips[0])
    (tmp_path / "frames").mkdir()
    for i, frame in enumerate(clips[0]):
        PIL.Image.fromarray(frame).save(tmp_path / "frames" / f"frame_{i:02d}.png")
    for given in (str(tmp_path / "clip.npy"), str(tmp_path / "frames")):
        assert main(["run", out, "--video", given, "--json"]) == 0
        _same(json.loads(capsys.readouterr().out), reference(clips[0]))
    video = _mp4(tmp_path / "clip.mp4", np.repeat(np.repeat(clips[0], 2, axis=1), 2, axis=2))
    decoded = fx2onnx.runtime.pipelines.read_video(video)  # PyAV's frames (the pipeline decodes with torchcodec)
    assert decoded.shape == (8, 80, 96, 3)
    _same(ours(video), reference(decoded))
    # a text to a video model, a file that is no video, an array of another shape
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    np.save(tmp_path / "flat.npy", np.zeros((4, 32, 32)))
    for argv, words in ([["running"], "takes --video PATH, not texts"],
                        [["--video", str(tmp_path / "broken.mp4")], "does not decode as a video"],
                        [["--video", str(tmp_path / "flat.npy")], "holds an array of shape (4, 32, 32)"],
                        [["--video", str(tmp_path / "missing.mp4")], "does not exist"]):
        assert main(["run", out, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
