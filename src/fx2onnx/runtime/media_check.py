"""The images, videos and WAV files of a ``generate`` command decoded before any model is loaded.

A file that does not decode (cut, renamed from another format, not an image at all) is refused in one line
naming it and what to do, whatever the decoder raises (Pillow raises ``OSError``, ``SyntaxError``,
``ValueError``, ``struct.error`` or zlib's errors on broken files), before onnxruntime loads the folder.
"""

from __future__ import annotations

import os
from typing import Iterable

from .speech import read_wav


def check_image(path: str, animated: bool = False) -> None:
    """Decodes the image (every frame when ``animated``) of ``path``; ValueError in one line when it cannot."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{'Video' if animated else 'Image'} file {path!r} does not exist.")
    import PIL.Image
    import PIL.ImageSequence

    try:
        with PIL.Image.open(path) as image:
            frames = PIL.ImageSequence.Iterator(image) if animated else [image]
            for frame in frames:
                frame.convert("RGB")
    except Exception as e:  # noqa: BLE001 - Pillow's decoders raise many types on a broken file
        kind = "an animated image (GIF, PNG or WebP)" if animated else "an image (PNG, JPEG...)"
        raise ValueError(f"{path!r} does not decode as {kind} ({type(e).__name__}): give a whole file of that "
                         "kind (a download cut short, or another format renamed, fails here).") from None


def check_wav(path: str) -> None:
    """Decodes the WAV file ``path`` (:func:`fx2onnx.runtime.speech.read_wav`); ValueError in one line when it cannot."""

    try:
        read_wav(path)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 - the wave module raises several types on a broken file
        raise ValueError(f"{path!r} does not decode as a PCM WAV file ({type(e).__name__}): convert it, e.g. "
                         "ffmpeg -i IN -ar 16000 -ac 1 OUT.wav.") from None


def check_media(images: Iterable[str] = (), audios: Iterable[str] = (), videos: Iterable[str] = ()) -> None:
    """Decodes every file given (values may hold several paths separated by commas, as on the command line)."""
    def split(values: Iterable[str]) -> list[str]:
        return [p for value in values for p in value.split(",") if p]

    for path in split(images):
        check_image(path)
    for path in split(videos):
        check_image(path, animated=True)
    for path in split(audios):
        check_wav(path)
