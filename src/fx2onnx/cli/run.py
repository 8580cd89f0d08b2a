"""``python -m fx2onnx run FOLDER INPUT...``: a folder of a single-pass model (a classifier, a tagger, a masked
language model, an embedder, a detector, a segmenter, a depth estimator, a CTC speech recognizer) on texts,
``--image`` or ``--audio`` files, printing what transformers' pipeline of its task returns (``--json``: as JSON).
Imports the runtime only: no torch at start."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from ..runtime.entities import AGGREGATIONS
from ..runtime.pipelines import MODALITY_OPTION, SEGMENTATION_TASKS, TWO_TOWER_TASKS, pipeline
from ..runtime.text_to_audio import write_wav


def _features(value: Any) -> dict[str, Any]:
    """An embedding (nested lists) as its shape and norm."""
    array = np.asarray(value, dtype=np.float32)
    return {"shape": list(array.shape), "norm": round(float(np.linalg.norm(array)), 6)}


def _depth(result: dict[str, Any]) -> dict[str, Any]:
    """A depth map as its shape and range (and the PNG written, if any)."""
    depth = np.asarray(result["predicted_depth"])
    return {"shape": list(depth.shape), "min": round(float(depth.min()), 6), "max": round(float(depth.max()), 6),
            **({"saved": result["saved"]} if "saved" in result else {})}


def _masks(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A segmentation's masks as their labels and the share of the image each covers (and the PNGs written)."""
    return [{"label": m["label"], "score": m["score"],
             "share": round(float((np.asarray(m["mask"]) > 0).mean()), 6),
             **({"saved": m["saved"]} if "saved" in m else {})} for m in result]


def _generated(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Generated masks (mask-generation) as their scores and the share of the image each covers (and the PNGs)."""
    saved = result.get("saved", [])
    return [{"score": round(float(score), 6), "share": round(float(np.asarray(mask).mean()), 6),
             **({"saved": saved[i]} if saved else {})}
            for i, (mask, score) in enumerate(zip(result["masks"], result["scores"]))]


def _speech(result: dict[str, Any]) -> dict[str, Any]:
    """A waveform (text-to-audio) as its length, rate and duration (and the WAV written)."""
    samples, rate = int(np.asarray(result["audio"]).shape[-1]), int(result["sampling_rate"])
    return {"samples": samples, "sampling_rate": rate, "seconds": round(samples / rate, 3),
            **({"saved": result["saved"]} if "saved" in result else {})}


def _save(task: str, results: list[Any], inputs: list[str], folder: str) -> None:
    """Writes each depth map as a PNG (``<image>_depth.png``), each mask (``<image>_<label>.png``), each embedding
    as a ``.npy`` file, into ``folder``."""
    os.makedirs(folder, exist_ok=True)
    for number, (value, result) in enumerate(zip(inputs, results), 1):
        stem = os.path.splitext(os.path.basename(value))[0] if task != "feature-extraction" else f"text_{number}"
        if task == "text-to-audio":
            result["saved"] = write_wav(os.path.join(folder, f"speech_{number}.wav"), result["audio"],
                                        result["sampling_rate"])
        elif task == "mask-generation":
            import PIL.Image  # deferred: the command starts without the imaging library

            result["saved"] = [os.path.join(folder, f"{stem}_mask_{i}.png") for i in range(len(result["masks"]))]
            for mask, path in zip(result["masks"], result["saved"]):
                PIL.Image.fromarray(np.asarray(mask, dtype=np.uint8) * 255, mode="L").save(path)
        elif task == "depth-estimation":
            result["saved"] = os.path.join(folder, f"{stem}_depth.png")
            result["depth"].save(result["saved"])
        elif task in SEGMENTATION_TASKS:
            for mask in result:
                mask["saved"] = os.path.join(folder, f"{stem}_{mask['label'].replace(os.sep, '_')}.png")
                mask["mask"].save(mask["saved"])
        else:
            np.save(os.path.join(folder, f"{stem}.npy"), np.asarray(result, dtype=np.float32))


def _lines(task: str, result: Any) -> list[str]:
    """The result of one input, readable."""
    if task == "document-question-answering":
        if not result:
            return ["(no answer)"]
        return [f"{a['answer']!r:<30} {a['score']:.4f}  words [{a['start']}:{a['end']}]" for a in result]
    if task == "table-question-answering":
        return [f"{result['answer']!r}  cells {result['coordinates']}"]
    if task == "keypoint-matching":
        if not result:
            return ["(no match above the threshold)"]
        return [f"({m['keypoint_image_0']['x']}, {m['keypoint_image_0']['y']}) -> "
                f"({m['keypoint_image_1']['x']}, {m['keypoint_image_1']['y']})  {m['score']:.4f}" for m in result]
    if task == "text-to-audio":
        speech = _speech(result)
        return [f"audio: {speech['samples']} samples at {speech['sampling_rate']} Hz ({speech['seconds']:.2f} s)" +
                (f", saved as {speech['saved']}" if "saved" in speech else "")]
    if task == "mask-generation":
        if not result["masks"]:
            return ["(no mask above the thresholds)"]
        return [f"mask {i:<3} score {m['score']:.4f}  {100 * m['share']:5.1f} % of the image" +
                (f", saved as {m['saved']}" if "saved" in m else "") for i, m in enumerate(_generated(result))]
    if task in SEGMENTATION_TASKS:
        return [f"{m['label']:<20} {100 * m['share']:5.1f} % of the image" + (f", saved as {m['saved']}" if "saved" in m
                                                                             else "") for m in _masks(result)]
    if task == "depth-estimation":
        depth = _depth(result)
        saved = f", saved as {depth['saved']}" if "saved" in depth else ""
        return [f"depth: shape {depth['shape']}, from {depth['min']:.4g} to {depth['max']:.4g}{saved}"]
    if task in ("feature-extraction", "image-feature-extraction"):
        features = _features(result)
        return [f"embedding: shape {features['shape']}, norm {features['norm']:.6g}"]
    if task == "automatic-speech-recognition":
        return [result["text"]]
    if task == "fill-mask":
        rows = result if result and isinstance(result[0], list) else [result]
        return [f"{p['score']:.4f}  {p['token_str']!r:>12}  {p['sequence']}" for row in rows for p in row]
    if task.endswith("object-detection"):
        if not result:
            return ["(no object above the threshold)"]
        return [f"{o['label']:<12} {o['score']:.4f}  box {[o['box'][k] for k in ('xmin', 'ymin', 'xmax', 'ymax')]}"
                for o in result]
    if task == "zero-shot-classification":
        return [f"{label:<20} {score:.4f}" for label, score in zip(result["labels"], result["scores"])]
    if task == "token-classification":
        if not result:
            return ["(no entity)"]
        return [f"{e['word']!r:>14}  {e.get('entity', e.get('entity_group')):<10} {e['score']:.4f}  "
                f"[{e['start']}:{e['end']}]" for e in result]
    labels = result if isinstance(result, list) else [result]
    return [f"{r['label']:<20} {r['score']:.4f}" for r in labels]


def run(args: argparse.Namespace) -> int:
    pipe = pipeline(args.folder, threads=args.threads)
    given = {"text": args.inputs, "image": args.image or [], "audio": args.audio or [], "video": args.video or []}
    others = [m for m, values in given.items() if values and m != pipe.modality]
    if others:
        raise ValueError(f"{args.folder!r} is a folder of task {pipe.task!r}: it takes "
                         f"{MODALITY_OPTION[pipe.modality]}, not {MODALITY_OPTION[others[0]]}.")
    inputs = given[pipe.modality]
    if not inputs:
        raise ValueError(f"{args.folder!r} is a folder of task {pipe.task!r}: give {MODALITY_OPTION[pipe.modality]}.")
    options = dict(top_k=args.top_k)
    if pipe.task == "zero-shot-classification":
        options = dict(candidate_labels=args.labels, hypothesis_template=args.template, multi_label=args.multi_label)
    elif pipe.task == "zero-shot-object-detection":
        options = dict(candidate_labels=args.labels, hypothesis_template=args.template, threshold=args.threshold,
                       top_k=args.top_k)
    elif pipe.task in TWO_TOWER_TASKS:
        options = dict(candidate_labels=args.labels, hypothesis_template=args.template)
    elif pipe.task == "object-detection":
        options = dict(threshold=0.5 if args.threshold is None else args.threshold)
    elif pipe.task == "keypoint-matching":  # the images two by two: A B makes one pair, A B C D two
        if len(inputs) % 2:
            raise ValueError(f"a keypoint-matching folder matches images two by two: give an even number of --image "
                             f"(got {len(inputs)}).")
        inputs = [[inputs[i], inputs[i + 1]] for i in range(0, len(inputs), 2)]
        options = dict(threshold=0.0 if args.threshold is None else args.threshold)
    if pipe.task == "token-classification":
        options["aggregation_strategy"] = args.aggregation or "none"
    elif args.aggregation:
        raise ValueError(f"--aggregation is an option of a token-classification folder, not of a {pipe.task} one.")
    sam = {k: getattr(args, k) for k in ("points_per_batch", "points_per_crop", "pred_iou_thresh",
                                         "stability_score_thresh") if getattr(args, k) is not None}
    if pipe.task == "mask-generation":
        options = sam
    elif sam:
        raise ValueError(f"--{next(iter(sam)).replace('_', '-')} is an option of a mask-generation folder, not of a "
                         f"{pipe.task} one.")
    if pipe.task == "table-question-answering":
        options = dict(table=args.table)
    elif args.table:
        raise ValueError(f"--table is an option of a table-question-answering folder, not of a {pipe.task} one.")
    if pipe.task == "document-question-answering":
        options = dict(word_boxes=args.word_boxes, top_k=args.top_k)
    elif args.word_boxes:
        raise ValueError(f"--word-boxes is an option of a document-question-answering folder, not of a {pipe.task} "
                         "one.")
    if pipe.task in SEGMENTATION_TASKS:
        options = dict(subtask=args.subtask, threshold=args.threshold)
    elif args.subtask:
        raise ValueError(f"--subtask is an option of a segmentation folder, not of a {pipe.task} one.")
    if args.threshold is not None and not pipe.task.endswith("object-detection") and \
            pipe.task not in (*SEGMENTATION_TASKS, "keypoint-matching"):
        raise ValueError(f"--threshold is an option of a detection, segmentation or keypoint-matching folder, not of "
                         f"a {pipe.task} one.")
    if pipe.task != "zero-shot-classification" and args.multi_label:
        raise ValueError(f"--multi-label is an option of a zero-shot-classification folder, not of a {pipe.task} one.")
    if not pipe.task.startswith("zero-shot") and (args.labels or args.template):
        raise ValueError(f"--labels and --template are options of a zero-shot folder, not of a {pipe.task} one.")
    if pipe.task == "document-question-answering":  # one question at a time, as the pipeline
        results = [pipe(question=question, **options) for question in inputs]
    else:
        results = pipe(list(inputs), **options)
    if pipe.task == "table-question-answering" and len(inputs) == 1:  # the pipeline's answer to one question
        results = [results]
    if pipe.task == "text-classification" and args.top_k is None:
        results = [[r] for r in results]
    if pipe.task == "text-to-audio":  # a WAV file per text, in the current folder by default
        args.save_dir = args.save_dir or "."
    if args.save_dir:
        if pipe.task not in ("depth-estimation", *SEGMENTATION_TASKS, "feature-extraction", "mask-generation",
                             "text-to-audio",
                             "image-feature-extraction"):
            raise ValueError(f"--save-dir writes depth maps, masks and embeddings, not the results of a {pipe.task} "
                             "folder.")
        _save(pipe.task, results, inputs, args.save_dir)
    if args.json:
        if pipe.task in ("feature-extraction", "image-feature-extraction"):
            results = [_features(r) for r in results]
        elif pipe.task == "depth-estimation":
            results = [_depth(r) for r in results]
        elif pipe.task == "mask-generation":
            results = [_generated(r) for r in results]
        elif pipe.task == "text-to-audio":
            results = [_speech(r) for r in results]
        elif pipe.task in SEGMENTATION_TASKS:
            results = [_masks(r) for r in results]
        print(json.dumps(results if len(results) > 1 else results[0], indent=1))
        return 0
    for number, (value, result) in enumerate(zip(inputs, results), 1):
        if len(inputs) > 1:
            print(f"[{number}] {' + '.join(value) if pipe.task == 'keypoint-matching' else value}")
        for line in _lines(pipe.task, result):
            print(("  " if len(inputs) > 1 else "") + line)
    return 0


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    cmd = commands.add_parser(
        "run", help="run a classifier, tagger, embedder, detector, depth or CTC folder written by export",
        description="Runs a folder written by 'export FOLDER --out OUT' for a single-pass task (text, token, image, "
        "audio or video classification, zero-shot classification of texts, images or sounds (--labels), object "
        "detection, segmentation, mask generation (SAM), depth estimation, fill-mask, feature extraction, sentence "
        "embeddings, CTC speech recognition, text to speech: a WAV file, table question answering: --table, document question answering: "
        "--word-boxes, keypoint matching: --image A --image B, the images two by two) on "
        "onnxruntime, the inputs prepared by the folder's own tokenizer, image processor or feature extractor "
        "(offline), and prints what transformers' pipeline of the task returns. "
        "Several inputs make a batch.")
    cmd.add_argument("folder", help="the folder written by export")
    cmd.add_argument("inputs", nargs="*", default=[], metavar="INPUT", help="the texts of a text folder")
    cmd.add_argument("--image", action="append", default=None, help="an image file (once per image)")
    cmd.add_argument("--audio", action="append", default=None,
                     help="a PCM WAV file at the feature extractor's rate (once per file)")
    cmd.add_argument("--video", action="append", default=None,
                     help="a video: a file PyAV decodes, a folder of frames or a .npy array (frames, height, width, 3)"
                     " (once per video)")
    cmd.add_argument("--top-k", type=int, default=None, help="the labels or tokens kept (default: the pipeline's)")
    cmd.add_argument("--labels", default=None,
                     help="a zero-shot folder (text, image, audio): the candidate labels, comma-separated")
    cmd.add_argument("--template", default=None,
                     help="a zero-shot folder: the hypothesis, {} the label (default: the pipeline's, 'This example "
                     "is {}.', 'This is a photo of {}.', 'This is a sound of {}.')")
    cmd.add_argument("--multi-label", action="store_true",
                     help="a zero-shot-classification folder: score each label on its own (several may hold)")
    cmd.add_argument("--aggregation", default=None, metavar="|".join(AGGREGATIONS),
                     help="a token-classification folder: how tokens are grouped into entities (transformers' "
                     "aggregation_strategy; default none: one entity per token)")
    cmd.add_argument("--threshold", type=float, default=None,
                     help="an object-detection folder: the lowest score of an object shown (default 0.5; 0.1 for "
                     "zero-shot-object-detection); a keypoint-matching folder: of a match (default 0)")
    cmd.add_argument("--subtask", default=None, metavar="panoptic|instance|semantic",
                     help="a segmentation folder: the masks made (default: the first its image processor makes)")
    cmd.add_argument("--table", default=None,
                     help="a table-question-answering folder: the table (a CSV file, its first line naming the "
                     "columns); the texts are the questions")
    cmd.add_argument("--word-boxes", default=None,
                     help="a document-question-answering folder: a JSON file of the page's words and their boxes, "
                     "[[word, [x0, y0, x1, y1]], ...] from 0 to 1000; the texts are the questions")
    cmd.add_argument("--points-per-crop", type=int, default=None,
                     help="a mask-generation folder: the points of the grid on each side (default 32)")
    cmd.add_argument("--points-per-batch", type=int, default=None,
                     help="a mask-generation folder: the points the mask decoder reads at once (default 64)")
    cmd.add_argument("--pred-iou-thresh", type=float, default=None,
                     help="a mask-generation folder: the lowest predicted quality of a mask kept (default 0.88)")
    cmd.add_argument("--stability-score-thresh", type=float, default=None,
                     help="a mask-generation folder: the lowest stability of a mask kept (default 0.95)")
    cmd.add_argument("--save-dir", default=None,
                     help="a depth-estimation folder: write each depth map as IMAGE_depth.png there; a segmenter's: "
                     "each mask as IMAGE_LABEL.png (a mask generator's: IMAGE_mask_N.png); an embedder's: each "
                     "embedding as a .npy file; a text-to-audio folder's: each waveform as speech_N.wav (default: the "
                     "current folder)")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    cmd.add_argument("--threads", type=int, default=None, help="onnxruntime's intra-op threads")
    cmd.set_defaults(func=run)
