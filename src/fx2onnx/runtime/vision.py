"""Image + prompt in, text out from a LLaVA, Gemma 3, Idefics 3, Qwen-VL or Mistral 3 folder
``python -m fx2onnx export`` wrote (``generate OUTDIR "describe the image" --image cat.png``).

:class:`VisionGenerator` reads the pieces the folder's ``fx2onnx.json`` names
(:mod:`fx2onnx.deploy.vision`). The folder's own processor (``AutoProcessor``, offline) turns
the images and the prompt into ``pixel_values`` and token ids (one ``<image>`` expanded into
the placeholders of one image); the vision piece runs once on all the images; its features
stay in onnxruntime memory and are fed unchanged to every step of the decoder (which writes
them over the placeholders of the prompt), run by :class:`fx2onnx.runtime.OnnxGenerator`
with its cache. A prompt without ``<image>`` gets one per image in front of it (between
``<|vision_start|>`` and ``<|vision_end|>`` where the tokenizer has them), a new line between
them and the text.

The vision piece takes every input it names from the processor's outputs (Qwen2-VL's:
``pixel_values``, the patches of every image, and ``image_grid_thw``). A decoder whose
``position_ids`` have three rows (Qwen2-VL) gets the prompt's multimodal rotary positions
computed from the grid (:func:`fx2onnx.runtime.mrope.rope_index`). Every output of the vision
piece is fed to the decoder (Qwen3-VL's deepstack features after the image features). When the
processor gives ``image_sizes`` the vision piece does not take (Mistral 3: images padded to the
largest), each image cropped to its size runs alone, the features concatenated; so does each image's grid of
patches when it gives ``spatial_shapes`` the piece does not take (NaFlex: LFM2-VL), and each image's tiles laid out
on their grid when the piece takes ``grid_pixel_values`` (LLaVA-OneVision). Qwen2-VL's,
Qwen2.5-VL's and Qwen3-VL's folders also take videos (animated images read by :func:`read_video`): the vision
piece runs on their patches and grids, their features go over the video placeholders in the
order of the prompt, their temporal patches get their own time positions.

.. code-block:: python

    from fx2onnx.runtime.vision import VisionGenerator
    gen = VisionGenerator("llava_onnx")
    result = gen.generate_text("describe the image", ["cat.png"], max_new_tokens=20)
    print(result.text)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from ..ort_values import ort_value_to_numpy
from .folder import TextResult, TextStream, _read_json, open_pieces
from .mrope import rope_index_of
from .sampling import Sampling

#: the tokens around an image's placeholders in a prompt, where the tokenizer has them (Qwen2-VL)
VISION_MARKERS = ("<|vision_start|>", "<|vision_end|>")
#: the image processors giving torch tensors only (timm's: ``return_tensors="pt"``), read back as numpy arrays
TORCH_ONLY_PROCESSORS = ("TimmWrapperImageProcessor",)
#: an input of the vision piece named as transformers.js feeds it -> the processor's output it is (Qwen2-VL's grid)
VISION_INPUT_ALIASES = {"grid_thw": "image_grid_thw"}
#: the input of a vision piece taking one image's tiles laid out on their grid (:mod:`fx2onnx.deploy.anyres`)
GRID_INPUT = "grid_pixel_values"


def _as_constant(array: np.ndarray) -> np.ndarray:
    """A feature array as the decoder's constants take it (bfloat16 as its bits, ``uint16``)."""
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def read_video(path: str | os.PathLike) -> np.ndarray:
    """The RGB frames ``(frames, height, width, 3)`` uint8 of an animated image (GIF, PNG, WebP...
    through Pillow): a video without a video decoder; a still image is a video of one frame."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Video file {path!r} does not exist.")
    import PIL.Image
    import PIL.ImageSequence

    try:
        with PIL.Image.open(path) as video:
            frames = [np.asarray(frame.convert("RGB")) for frame in PIL.ImageSequence.Iterator(video)]
    except (PIL.UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path!r} is not an animated image Pillow reads ({type(e).__name__}): give the frames as "
                         "a GIF, PNG or WebP animation.") from None
    return np.stack(frames)


def read_image(path: str | os.PathLike) -> Any:
    """The RGB image of a file (PNG, JPEG... through Pillow)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Image file {path!r} does not exist.")
    import PIL.Image

    try:
        with PIL.Image.open(path) as image:
            return image.convert("RGB")
    except (PIL.UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path!r} is not an image Pillow reads ({type(e).__name__}).") from None


def load_images(images: Any) -> list[Any]:
    """One image or a list (paths, or PIL images) as a list of PIL images (the paths read by :func:`read_image`)."""
    images = list(images) if isinstance(images, (list, tuple)) else [images]
    return [read_image(i) if isinstance(i, (str, os.PathLike)) else i for i in images]


def processed_images(processor: Any, images: list[Any]) -> dict[str, Any]:
    """``processor(images=images)`` as numpy arrays (through torch tensors for a processor of
    :data:`TORCH_ONLY_PROCESSORS`)."""
    if type(processor).__name__ in TORCH_ONLY_PROCESSORS:
        given = processor(images=images, return_tensors="pt")
        return {k: v.numpy() if hasattr(v, "numpy") else v for k, v in given.items()}
    return dict(processor(images=images, return_tensors="np"))


def image_batches(processor: Any, images: list[Any]) -> list[dict[str, Any]]:
    """The arrays an image processor gives for ``images``, in order: one batch, or one per image when the processor
    keeps each image's aspect ratio and its arrays do not stack (ZoeDepth, TextNet, EoMT) or pads them to the largest
    of the batch (DETR, YOLOS: the pads would change the outputs; transformers' pipeline runs each image alone)."""
    if getattr(processor, "do_pad", False) and len(images) > 1:
        return [processed_images(processor, [image]) for image in images]
    try:
        return [processed_images(processor, images)]
    except ValueError:  # "Unable to convert output 'pixel_values' (type: list) to tensor"
        return [processed_images(processor, [image]) for image in images]


def load_processor(folder: str) -> Any:
    """The processor of ``folder`` (``AutoProcessor``, offline); a ValueError naming the fix when it has none."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{folder!r} has no processor transformers can load ({type(e).__name__}): copy "
                         "the processor and tokenizer files of the checkpoint into the folder.") from None


class VisionGenerator:
    """The vision encoder, decoder, processor and generation config of an exported LLaVA, Gemma 3,
    Idefics 3, Qwen-VL (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) or Mistral 3 folder.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from a LLaVA, Gemma 3,
        Idefics 3, Qwen-VL or Mistral 3 folder
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    #: the task of the folders it opens, the piece computing the features, the error naming another folder
    task, first = "image-text-to-text", "vision"
    refusal = ("{folder} is not an image-text folder (task {task}): export a LLaVA, Gemma 3, Idefics 3, Qwen-VL or "
               "Mistral 3 folder with python -m fx2onnx export CHECKPOINT --out FOLDER.")

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        self.folder = os.fspath(folder)
        self.pieces, self.vision, self.feature_names, self.decoder = open_pieces(
            self.folder, self.task, self.first, self.refusal, providers, threads)
        generation = _read_json(os.path.join(self.folder, "generation_config.json"))
        #: the folder's config.json
        self.config = config = _read_json(os.path.join(self.folder, "config.json"))
        self.eos_token_id = generation.get("eos_token_id", config.get("text_config", {}).get("eos_token_id"))
        self.pad_token_id = generation.get("pad_token_id", config.get("pad_token_id"))
        self.image_token_id = config.get("image_token_id")
        #: the placeholder of a video's features when the decoder takes videos (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)
        self.video_token_id = self.pieces["decoder"].get("video_token_id")
        self.merge_size = config.get("vision_config", {}).get("spatial_merge_size")
        #: Qwen2.5-VL: the time positions per second of video (Qwen2-VL: one per temporal patch)
        self.tokens_per_second = config.get("vision_config", {}).get("tokens_per_second") \
            if config.get("model_type") == "qwen2_5_vl" else None
        #: Qwen3-VL: every temporal patch of a video is a grid of its own (a timestamp written between them)
        self.frames_apart = config.get("model_type") in ("qwen3_vl", "qwen3_vl_moe")
        positions = [i for i in self.decoder.session.get_inputs() if i.name == "position_ids"]
        #: Qwen2-VL: the positions in rows (time, height, width) computed from the images' grids
        self.position_rows = len(positions[0].shape) == 3 if positions else False
        self._processor: Any = None

    @property
    def processor(self) -> Any:
        """The folder's processor (image processor and tokenizer, offline)."""
        if self._processor is None:
            self._processor = load_processor(self.folder)
        return self._processor

    def inputs(self, prompt: str, images: Sequence[Any], chat: bool = False,
               videos: Sequence[Any] = ()) -> dict[str, np.ndarray]:
        """The processor's ``input_ids``, ``attention_mask`` and ``pixel_values`` of one prompt
        and its images (paths or PIL images) and videos (paths of animated images, or frames
        ``(frames, height, width, 3)``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL); with ``chat``, the prompt, its images
        and videos as a user message in the processor's chat template (the assistant's turn opened)."""
        if not images and not videos:
            raise ValueError("Give at least one image (--image FILE)" + (" or video (--video FILE)."
                                                                        if self.video_token_id is not None else "."))
        if videos and self.video_token_id is None:
            raise ValueError(f"The decoder of {self.folder!r} takes no video: give images (Qwen2-VL, Qwen2.5-VL and "
                             "Qwen3-VL folders take videos).")
        pictures = load_images(images)
        clips = [read_video(v) if isinstance(v, (str, os.PathLike)) else v for v in videos]
        text = self._chat(prompt, len(images), len(videos)) if chat else \
            self._with_placeholders(prompt, len(images), len(videos))
        media = {"images": pictures} if pictures else {}
        if clips:
            media["videos"] = clips
        return self._processed(dict(self.processor(**media, text=text, return_tensors="np")))

    def batch_inputs(self, prompts: Sequence[str], images: Sequence[Sequence[Any]],
                     chat: bool = False) -> dict[str, np.ndarray]:
        """:meth:`inputs` of several prompts, ``images[i]`` those of ``prompts[i]``: the shorter
        prompts padded on the left (``attention_mask``), as transformers' ``generate`` expects."""
        if len(prompts) != len(images) or any(not i for i in images):
            raise ValueError(f"{len(prompts)} prompts and {len(images)} lists of images: give one list, of at least "
                             "one image, per prompt.")
        pictures = [load_images(group) for group in images]
        texts = [self._chat(p, len(group)) if chat else self._with_placeholders(p, len(group))
                 for p, group in zip(prompts, images)]
        tokenizer = self.processor.tokenizer
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        try:
            processed = dict(self.processor(images=pictures, text=texts, padding=True, return_tensors="np"))
        finally:
            tokenizer.padding_side = side
        return self._processed(processed)

    def _chat(self, prompt: str, count: int, videos: int = 0) -> str:
        """``prompt`` after ``count`` images and ``videos`` videos as a user message in the processor's
        chat template."""
        if not getattr(self.processor, "chat_template", None):
            raise ValueError(f"The processor of {self.folder!r} has no chat template: generate without --chat.")
        token = getattr(self.processor, "image_token", "<image>")
        if token in prompt:
            raise ValueError(f"With --chat the template places the images: remove {token!r} from the prompt.")
        content = [{"type": "image"}] * count + [{"type": "video"}] * videos + [{"type": "text", "text": prompt}]
        return self.processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                                  tokenize=False)

    def _with_placeholders(self, prompt: str, count: int, videos: int = 0) -> str:
        """``prompt``, or one image placeholder per image (then one per video) and ``prompt`` when it
        holds none."""
        token = getattr(self.processor, "image_token", "<image>")
        video = getattr(self.processor, "video_token", None) if videos else None
        if token in prompt or (video is not None and video in prompt):
            return prompt
        vocabulary = self.processor.tokenizer.get_vocab()
        if all(marker in vocabulary for marker in VISION_MARKERS):  # Qwen2-VL: the image between its markers
            token = VISION_MARKERS[0] + token + VISION_MARKERS[1]
            video = video and VISION_MARKERS[0] + video + VISION_MARKERS[1]
        return token * count + (video or "") * videos + "\n" + prompt

    @staticmethod
    def _processed(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The processor's outputs as the vision piece takes them: Idefics 3's ``(prompts, images or
        tiles, 3, H, W)`` one image after the other, without the all-zero images padding a prompt of
        fewer tiles (``get_image_features`` drops them too); Qwen2-VL's ``(patches, values)`` kept; NaFlex's
        ``(images, patches, values)`` and LLaVA-OneVision's ``(images, tiles, 3, H, W)`` kept, each image cropped to
        its grid later (:meth:`vision_outputs`)."""
        if "spatial_shapes" in inputs or "image_sizes" in inputs and np.ndim(inputs.get("pixel_values")) == 5:
            return inputs  # each image's tiles laid out on their grid later (LLaVA-OneVision)
        pixel_mask = inputs.pop("pixel_attention_mask", None)
        if "pixel_values" not in inputs:  # videos only
            return inputs
        pixels = inputs["pixel_values"]
        if pixels.ndim > 2:
            inputs["pixel_values"] = pixels = pixels.reshape(-1, *pixels.shape[-3:])
        if pixel_mask is not None:
            masks = np.asarray(pixel_mask).reshape(pixels.shape[0], -1).astype(bool)
            real = masks.any(axis=1)
            if not masks[real].all():
                raise ValueError("The processor padded an image (pixel_attention_mask): the vision piece takes whole "
                                 "images or tiles only (Idefics 3: keep do_image_splitting on).")
            if not real.all():  # the padding images of a batch
                inputs["pixel_values"] = pixels[real]
        return inputs

    def image_features(self, inputs: dict[str, np.ndarray] | np.ndarray) -> Any:
        """Runs the vision piece once on every image: its features, an onnxruntime value;
        ``inputs``: the processor's outputs (the vision piece takes those it names), or the
        ``pixel_values`` alone."""
        return self.vision_outputs(inputs)[0]

    def vision_outputs(self, inputs: dict[str, np.ndarray] | np.ndarray) -> list[Any]:
        """Every output of the vision piece (onnxruntime values), the features first (Qwen3-VL: then
        its deepstack features), each fed unchanged to every decoder step."""
        import onnxruntime

        if isinstance(inputs, np.ndarray):
            inputs = {"pixel_values": inputs}
        names = {i.name for i in self.vision.get_inputs()}
        if GRID_INPUT in names and GRID_INPUT not in inputs:
            return self._tiles_on_their_grid(inputs)
        if "image_sizes" in inputs and "image_sizes" not in names:
            return self._one_image_at_a_time(inputs)
        if "spatial_shapes" in inputs and "spatial_shapes" not in names:
            return self._one_grid_at_a_time(inputs)
        feeds = {}
        for info in self.vision.get_inputs():
            key = info.name if info.name in inputs else VISION_INPUT_ALIASES.get(info.name, info.name)
            if key not in inputs:
                raise ValueError(f"The vision piece takes {info.name!r}, which the processor does not give "
                                 f"({sorted(inputs)}).")
            array = np.asarray(inputs[key])
            rank = len(info.shape)
            if info.name == "pixel_values" and array.ndim > rank:  # (prompts, images, 3, H, W): one after the other
                array = array.reshape(-1, *array.shape[array.ndim - rank + 1:])
            if info.type == "tensor(bfloat16)":
                import ml_dtypes
                import onnx

                feeds[info.name] = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    np.ascontiguousarray(array.astype(ml_dtypes.bfloat16)).view(np.uint16), onnx.TensorProto.BFLOAT16)
                continue
            dtype = {"tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
                     "tensor(bool)": np.bool_}.get(info.type, np.float32)
            feeds[info.name] = onnxruntime.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array.astype(dtype)))
        return self.vision.run_with_ort_values(self.feature_names, feeds)

    def _one_image_at_a_time(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Mistral 3: the processor padded the images to the largest; each one cropped to its size
        (``image_sizes``) runs alone, the outputs concatenated (bfloat16 ones as their bits)."""
        pixels = np.asarray(inputs["pixel_values"])
        sizes = np.asarray(inputs["image_sizes"]).reshape(-1, 2)
        if pixels.ndim != 4 or pixels.shape[0] != sizes.shape[0]:
            raise ValueError(f"pixel_values of shape {pixels.shape} and image_sizes of shape {sizes.shape}: one padded "
                             "image (3, H, W) per size expected.")
        outputs = [[ort_value_to_numpy(v) for v in self.vision_outputs({"pixel_values": pixels[i:i + 1, :, :h, :w]})]
                   for i, (h, w) in enumerate(sizes)]
        joined = [np.concatenate(parts, axis=0) for parts in zip(*outputs)]
        return [_as_constant(a) for a in joined]

    def _one_grid_at_a_time(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """NaFlex (LFM2-VL): the processor padded every image's patches to the longest sequence; each one cropped to
        its grid (``spatial_shapes``, rows and columns of patches) runs alone as ``(1, rows, cols, patch_values)``,
        the outputs concatenated."""
        pixels = np.asarray(inputs["pixel_values"])
        grids = np.asarray(inputs["spatial_shapes"]).reshape(-1, 2)
        if pixels.ndim != 3 or pixels.shape[0] != grids.shape[0]:
            raise ValueError(f"pixel_values of shape {pixels.shape} and spatial_shapes of shape {grids.shape}: one "
                             "sequence of patches (patches, values) per grid expected.")
        outputs = []
        for i, (rows, cols) in enumerate(grids):
            grid = pixels[i:i + 1, :rows * cols].reshape(1, rows, cols, pixels.shape[-1])
            outputs.append([ort_value_to_numpy(v) for v in self.vision_outputs({"pixel_values": grid})])
        joined = [np.concatenate(parts, axis=0) for parts in zip(*outputs)]
        return [_as_constant(a) for a in joined]

    def _tiles_on_their_grid(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """LLaVA-OneVision: each image (the whole image, then its tiles, padded to the most tiles) runs alone, its tiles
        laid out on the grid of the resolution its size picks (transformers' ``select_best_resolution`` among the
        configuration's ``image_grid_pinpoints``), the outputs concatenated."""
        from transformers.image_processing_utils import select_best_resolution  # deferred: heavy

        pixels = np.asarray(inputs["pixel_values"])
        sizes = np.asarray(inputs["image_sizes"]).reshape(-1, 2)
        side = self.config["vision_config"]["image_size"]
        if pixels.ndim != 5 or pixels.shape[0] != sizes.shape[0]:
            raise ValueError(f"pixel_values of shape {pixels.shape} and image_sizes of shape {sizes.shape}: the tiles "
                             "(tiles, 3, H, W) of one image per size expected.")
        if np.any(np.asarray(inputs.get("batch_num_images", 1)) > 1):  # transformers tiles no image of these
            raise ValueError("Several images in one prompt (batch_num_images > 1): this folder's vision piece takes "
                             "one image a prompt; give each prompt one image.")
        outputs = []
        for i, size in enumerate(sizes):
            height, width = select_best_resolution(tuple(int(v) for v in size), self.config["image_grid_pinpoints"])
            rows, cols = height // side, width // side
            feeds = {"pixel_values": pixels[i, :1], "image_sizes": sizes[i:i + 1],
                     GRID_INPUT: pixels[i, 1:1 + rows * cols].reshape(rows, cols, *pixels.shape[2:])}
            outputs.append([ort_value_to_numpy(v) for v in self.vision_outputs(feeds)])
        joined = [np.concatenate(parts, axis=0) for parts in zip(*outputs)]
        return [_as_constant(a) for a in joined]

    def _features(self, inputs: dict[str, np.ndarray], ids: np.ndarray) -> list[Any]:
        """The vision piece's outputs on the images, or on the videos (their patches and grids), or
        on both, then in the order of their placeholders in the prompts (what the decoder writes)."""
        if "pixel_values_videos" not in inputs:
            return self.vision_outputs(inputs)
        if self.video_token_id is None:
            raise ValueError(f"The decoder of {self.folder!r} takes no video.")
        video = self.vision_outputs({"pixel_values": inputs["pixel_values_videos"],
                                     "image_grid_thw": inputs["video_grid_thw"]})
        if "pixel_values" not in inputs:
            return video
        image = self.vision_outputs(inputs)
        kinds = ids[np.isin(ids, [self.image_token_id, self.video_token_id])]  # batch after batch, as the decoder
        merged = []
        for of_images, of_videos in zip(image, video):
            of_images, of_videos = ort_value_to_numpy(of_images), ort_value_to_numpy(of_videos)
            rows = np.empty((kinds.size, of_images.shape[-1]), dtype=of_images.dtype)
            rows[kinds == self.image_token_id], rows[kinds == self.video_token_id] = of_images, of_videos
            merged.append(_as_constant(rows))
        return merged

    def generate_ids(self, inputs: dict[str, Any], max_new_tokens: int = 32,
                     streamer: Callable[[np.ndarray], None] | None = None,
                     sampling: Sampling | None = None) -> np.ndarray:
        """Greedy generation (or ``sampling``) on inputs already prepared (the processor's outputs, or
        the task zoo's): ``input_ids``, ``attention_mask`` and the image inputs the vision piece takes;
        the tokens ``(batch, prompt + new)`` transformers' ``generate`` returns on the same inputs
        (with a seed: the same draws, :class:`fx2onnx.runtime.sampling.Sampling`)."""
        inputs = {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in inputs.items()}
        ids = inputs["input_ids"].astype(np.int64)
        features = self._features(inputs, ids)
        positions = None
        if self.position_rows:
            positions = rope_index_of(inputs, self.image_token_id, self.merge_size, self.video_token_id,
                                      self.tokens_per_second, self.frames_apart)
        return self.decoder.generate(ids, max_new_tokens, inputs.get("attention_mask"), eos_token_id=self.eos_token_id,
                                     pad_token_id=self.pad_token_id, streamer=streamer, sampling=sampling,
                                     constants=dict(zip(self.feature_names, features)), position_ids=positions)

    def generate_text(
        self,
        prompt: str,
        images: Sequence[Any],
        max_new_tokens: int = 32,
        on_text: Callable[[str], None] | None = None,
        sampling: Sampling | None = None,
        chat: bool = False,
        videos: Sequence[Any] = (),
    ) -> TextResult:
        """Greedy generation (or ``sampling``) after ``prompt``, its ``images`` and ``videos`` (``chat``: in
        the processor's chat template): the tokens transformers' ``generate`` returns on the processor's outputs."""
        inputs = self.inputs(prompt, images, chat, videos)
        ids = inputs["input_ids"].astype(np.int64)
        tokenizer = self.processor.tokenizer
        stream = TextStream(tokenizer, on_text) if on_text is not None else None
        tokens = self.generate_ids(inputs, max_new_tokens, stream, sampling)
        new = [int(t) for t in tokens[0, ids.shape[1]:]]
        return TextResult([int(i) for i in ids[0]], new, tokenizer.decode(new, skip_special_tokens=True),
                          self.decoder.last_times)

    def generate_texts(self, prompts: Sequence[str], images: Sequence[Sequence[Any]],
                       max_new_tokens: int = 32, sampling: Sampling | None = None,
                       chat: bool = False) -> list[TextResult]:
        """Greedy generation (or ``sampling``) of a batch: ``prompts[i]`` after ``images[i]``, the
        prompts padded on the left; every result's tokens are transformers' ``generate`` on the same
        batch (a prompt which ends stays padded while the others go on)."""
        inputs = self.batch_inputs(prompts, images, chat)
        ids, mask = inputs["input_ids"].astype(np.int64), inputs["attention_mask"].astype(bool)
        tokens = self.generate_ids(inputs, max_new_tokens, sampling=sampling)
        tokenizer = self.processor.tokenizer
        results = []
        for row, prompt_mask in zip(tokens, mask):
            new = [int(t) for t in row[ids.shape[1]:]]
            results.append(TextResult([int(i) for i in row[:ids.shape[1]][prompt_mask]], new,
                                      tokenizer.decode(new, skip_special_tokens=True), self.decoder.last_times))
        return results
