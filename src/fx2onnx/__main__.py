"""Command line of fx2onnx: ``python -m fx2onnx <command> ...``.

Commands are argparse subcommands; each one is a function ``_cmd_<name>(args)``
registered in :func:`make_parser`. A model is given as ``module:attribute`` or as the
name of a tiny transformers architecture (see :mod:`fx2onnx.model_spec`).

.. code-block:: bash

    python -m fx2onnx export llama --out llama.onnx --exporter to_onnx
    python -m fx2onnx export my_models.py:make_model --out m.onnx --static --exporter dynamo
    python -m fx2onnx export path/to/checkpoint --out model_dir --quantize int4
    python -m fx2onnx generate model_dir "a prompt" --max-new-tokens 32
    python -m fx2onnx export path/to/whisper --out whisper_dir
    python -m fx2onnx generate whisper_dir --audio talk.wav
    python -m fx2onnx generate granite_speech_dir "summarize the talk" --audio talk.wav
    python -m fx2onnx generate llava_dir "describe the image" --image cat.png
    python -m fx2onnx validate llama.onnx llama
    python -m fx2onnx compare llama.onnx llama_dynamo.onnx --model llama

    python -m fx2onnx scenarios --out scenarios_out --workers 2
    python -m fx2onnx scenarios --out out --cases OneTensor CondOnValue --exporters custom dynamo
    python -m fx2onnx models --only llama --address tcp://scheduler-host:8786
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence


def _cmd_scenarios(args: argparse.Namespace) -> int:
    from .scenarios.build import build_pages
    from .scenarios.report import summary
    from .scenarios.report import load_rows

    meta = build_pages(
        args.out,
        cases=args.cases or None,
        exporters=args.exporters or None,
        workers=args.workers,
        timeout=args.timeout,
        use_cache=not args.no_cache,
    )
    rows, _ = load_rows(f"{args.out}/rows.json")
    origin = "reused from the cache" if meta.get("cached") else f"in {meta['duration']:.0f} s"
    print(f"{meta['tasks']} tasks {origin}; pages written in {args.out}")
    for t in summary(rows):
        print(
            f"  {t['exporter']:<24} static {t['static_ok']:>3}/{t['static_total']:<3} "
            f"dynamic {t['dynamic_ok']:>3}/{t['dynamic_total']:<3}"
        )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .inspect.report import deepest_failures, export_report, save_report
    from .model_spec import load_model_spec

    spec = load_model_spec(args.model, with_cache=args.with_cache)
    rows = export_report(
        spec.model,
        spec.args,
        spec.kwargs,
        dynamic_shapes=None if args.static else spec.dynamic_shapes,
        exporter=args.exporter,
        strict=args.strict,
        patches=spec.is_transformers,
        max_depth=args.max_depth,
        atol=args.atol,
        rtol=args.rtol,
        progress=not args.no_progress,
    )
    save_report(rows, args.out)
    failing = deepest_failures(rows)
    ok = sum(r["status"] == "OK" for r in rows)
    print(f"{ok}/{len(rows)} submodules export; report written in {args.out}")
    for path in failing:
        row = next(r for r in rows if r["path"] == path)
        print(f"  {path or '<model>'} ({row['class']}): {row['status']}: {row['error']}")
    return 0 if not failing else 1


def _steps(names: list[str], enabled: bool = True):
    """A tqdm progress bar over named steps (written on stderr)."""
    from tqdm.auto import tqdm

    return tqdm(names, disable=not enabled, unit="step", leave=False)


def _export_checkpoint(args: argparse.Namespace) -> int:
    """Exports a save_pretrained folder into a folder that generates (fx2onnx.deploy.export_folder):
    the model on the meta device, the weights streamed from its safetensors files."""
    from .deploy import export_folder

    if args.exporter != "to_onnx":
        raise ValueError("A checkpoint folder is exported with --exporter to_onnx only.")
    if not args.dynamic or args.strict:
        raise ValueError("A checkpoint folder is exported with dynamic shapes and a non-strict capture: "
                         "remove --static / --strict.")
    result = export_folder(
        args.model, args.out, task=args.task, dtype=args.dtype, with_cache=not args.no_cache,
        optimize=args.optimize or "onnxruntime", quantize=args.quantize, block_size=args.block_size,
        symmetric=not args.asymmetric, opset=args.opset, all_logits=args.all_logits,
        cache_in_place=not args.concatenated_cache, capture_all_layers=args.capture_all_layers,
        validate=args.validate,
        atol=args.atol, rtol=args.rtol,
        progress=not args.quiet,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        max_memory=args.max_memory,
    )
    for line in result.check_lines():
        print(f"  {line}")
    if result.genai:
        print(f"  onnxruntime-genai: no genai_config.json ({result.genai})")
    print(result)
    return 0 if result.ok else 1


def _generate_speech(args: argparse.Namespace) -> int:
    """Transcribes --audio with a folder exported from a speech-seq2seq checkpoint (fx2onnx.runtime.speech:
    Whisper; fx2onnx.runtime.speech_seq2seq: the others)."""
    from .runtime.speech import open_speech_generator

    if args.split == "placeholders":
        return _generate_audio_text(args)
    if args.prompts or args.ids is not None or args.chat:
        raise ValueError("A speech folder takes --audio only (no prompt, --ids or --chat).")
    if args.audio is None:
        raise ValueError("The folder holds a speech model: give --audio talk.wav.")
    if not os.path.isfile(args.audio):  # before the models are loaded
        raise FileNotFoundError(f"Audio file {args.audio!r} does not exist.")
    if _asks_sampling(args) or args.repetition_penalty != 1.0:
        raise ValueError("A speech folder generates greedily: remove the sampling options.")
    generator = open_speech_generator(args.folder, threads=args.threads)
    result = generator.transcribe(args.audio, args.max_new_tokens, language=args.language, task=args.task,
                                  on_text=lambda text: print(text, end="", flush=True), as_text=not args.print_ids)
    if result.texts is None:
        print(",".join(str(i) for i in result.new_ids[0]))
    else:
        print()
    print(result.summary(), file=sys.stderr)
    return 0


def _generate_audio_text(args: argparse.Namespace) -> int:
    """Generates after --audio (and a prompt, else the processor's transcription request) with a folder
    exported from a speech language model (fx2onnx.runtime.audio_text: Granite Speech, VibeVoice-ASR...)."""
    from .runtime.audio_text import AudioTextGenerator

    if len(args.prompts) > 1 or args.ids is not None or args.image or args.video:
        raise ValueError("This folder holds a speech language model: it takes --audio and at most one prompt "
                         "(no --ids, --image or --video).")
    audios = [a for a in (args.audio or "").split(",") if a]
    if not audios:
        raise ValueError("The folder holds a speech language model: give --audio talk.wav (a.wav,b.wav for several "
                         "audios of one prompt).")
    missing = [a for a in audios if not os.path.isfile(a)]
    if missing:  # before the models are loaded
        raise FileNotFoundError(f"Audio file {missing[0]!r} does not exist.")
    generator = AudioTextGenerator(args.folder, threads=args.threads)
    result = generator.generate_text(args.prompt, audios, args.max_new_tokens, sampling=_sampling(args),
                                     chat=args.chat, on_text=None if args.print_ids else
                                     (lambda text: print(text, end="", flush=True)))
    print(",".join(str(i) for i in result.new_ids) if args.print_ids else "")
    print(result.summary(), file=sys.stderr)
    return 0


def _asks_sampling(args: argparse.Namespace) -> bool:
    """Whether the command line asks for sampling (``--sample`` or one of its options)."""
    return args.sample or any(v is not None for v in (args.temperature, args.top_k, args.top_p, args.seed))


def _sampling(args: argparse.Namespace) -> Any:
    """The sampling options of the command line (greedy unless one is given)."""
    from .runtime.sampling import Sampling

    return Sampling(
        do_sample=_asks_sampling(args), temperature=args.temperature or 1.0,
        top_k=50 if args.top_k is None else args.top_k,
        top_p=1.0 if args.top_p is None else args.top_p, repetition_penalty=args.repetition_penalty, seed=args.seed,
    )


def _print_batch(results: list[Any]) -> None:
    """One block per prompt of a batch: its number, then its text."""
    for number, result in enumerate(results, 1):
        print(f"[{number}] {result.text}")
    total = sum(len(r.new_ids) for r in results)
    times = results[0].times
    print(f"batch of {len(results)}: {total} new tokens, prefill {times.prefill_total:.3f} s, decode "
          f"{times.decode_total:.3f} s", file=sys.stderr)


def _images_per_prompt(images: list[str], prompts: int) -> list[list[str]]:
    """``--image`` values (a.png,b.png allowed) grouped by prompt: all for one prompt, one value per prompt else."""
    groups = [[i for i in value.split(",") if i] for value in images]
    if prompts == 1:
        return [[i for group in groups for i in group]]
    if len(groups) != prompts:
        raise ValueError(f"{prompts} prompts and {len(groups)} --image: give --image once per prompt "
                         "(a.png,b.png for several images of one prompt).")
    return groups


def _generate_image_seq2seq(args: argparse.Namespace) -> int:
    """The text of each --image with a folder exported from an encoder-decoder reading pixels (TrOCR, Donut,
    BLIP, Florence-2: fx2onnx.runtime.image_seq2seq) or from GIT (fx2onnx.runtime.image_prefix), greedy; several
    images make a batch."""
    from .runtime.image_seq2seq import Seq2SeqImageGenerator

    if len(args.prompts) > 1 or args.ids is not None or args.chat or args.video:
        raise ValueError("This folder holds an image encoder-decoder: it takes --image and at most one prompt (Donut's "
                         "task prompt, BLIP's or GIT's caption start, Florence-2's task), no --ids, --chat or --video.")
    images = [i for value in args.image or [] for i in value.split(",") if i]
    if not images:
        raise ValueError("The folder holds an image encoder-decoder: give --image FILE (several make a batch).")
    missing = [i for i in images if not os.path.isfile(i)]
    if missing:  # before the models are loaded
        raise FileNotFoundError(f"Image file {missing[0]!r} does not exist.")
    if _asks_sampling(args) or args.repetition_penalty != 1.0:
        raise ValueError("An image encoder-decoder folder generates greedily: remove the sampling options.")
    if args.split == "prefix":  # GIT: the image features in front of the prompt (fx2onnx.runtime.image_prefix)
        from .runtime.image_prefix import ImagePrefixGenerator

        generator: Any = ImagePrefixGenerator(args.folder, threads=args.threads)
    else:
        generator = Seq2SeqImageGenerator(args.folder, threads=args.threads)
    one = len(images) == 1
    result = generator.describe(images, args.max_new_tokens, as_text=not args.print_ids, prompt=args.prompt,
                                on_text=(lambda text: print(text, end="", flush=True)) if one else None)
    if one and result.texts is not None:
        print()  # after the text printed as it was decoded
    else:
        for number, new_ids in enumerate(result.new_ids):
            text = result.texts[number] if result.texts is not None else ",".join(str(i) for i in new_ids)
            print(text if one else f"[{number + 1}] {text}")
    print(result.summary(), file=sys.stderr)
    return 0


def _generate_image_text(args: argparse.Namespace) -> int:
    """Generates after a prompt (or a batch of them) and --image files with a folder exported from an
    image-text checkpoint (fx2onnx.runtime.vision), greedy or sampled, the prompt in the chat template with --chat;
    an image encoder-decoder folder: :func:`_generate_image_seq2seq`."""
    from .runtime.vision import VisionGenerator

    if args.split in ("generic", "prefix"):
        return _generate_image_seq2seq(args)
    if not args.prompts or args.ids is not None:
        raise ValueError("An image-text folder takes a prompt and --image FILE (no --ids).")
    videos = args.video or []
    if not args.image and not videos:
        raise ValueError("The folder holds an image-text model: give --image FILE (once per image).")
    if videos and len(args.prompts) > 1:
        raise ValueError("--video takes one prompt: generate the prompts of a batch with images only.")
    images = _images_per_prompt(args.image or [], len(args.prompts))
    missing = [i for group in images for i in group + videos if not os.path.isfile(i)]
    if missing:  # before the models are loaded
        raise FileNotFoundError(f"{'Video' if missing[0] in videos else 'Image'} file {missing[0]!r} does not exist.")
    sampling = _sampling(args)
    generator = VisionGenerator(args.folder, threads=args.threads)
    if len(args.prompts) > 1:
        _print_batch(generator.generate_texts(args.prompts, images, args.max_new_tokens, sampling, chat=args.chat))
        return 0
    result = generator.generate_text(args.prompt, images[0], args.max_new_tokens,
                                     on_text=lambda text: print(text, end="", flush=True), sampling=sampling,
                                     chat=args.chat, videos=videos)
    print()
    print(result.summary(), file=sys.stderr)
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from .runtime.folder import FOLDER_METADATA, FolderGenerator, _read_json

    from .runtime.integrity import check_folder_files
    from .runtime.media_check import check_media

    args.prompt = args.prompts[0] if len(args.prompts) == 1 else None
    metadata = _read_json(os.path.join(args.folder, FOLDER_METADATA))
    # before onnxruntime loads anything: the folder as the export wrote it, the files given decode
    check_folder_files(args.folder, metadata)
    # which loop of the task's: the generic encoder-decoder split, a speech language model's placeholders
    task, args.split = metadata.get("task"), metadata.get("split")
    if task == "speech-seq2seq" and args.audio:
        check_media(audios=[args.audio])
    if task == "image-text-to-text":
        check_media(images=args.image or [], videos=args.video or [])
    if (args.prompt_lookup is not None or args.draft) and task in ("speech-seq2seq", "image-text-to-text"):
        raise ValueError(f"--prompt-lookup and --draft run a text decoder's folder, not a {task} one.")
    if task == "speech-seq2seq":
        return _generate_speech(args)
    if task == "image-text-to-text":
        return _generate_image_text(args)
    if args.image or args.video:
        raise ValueError(f"{args.folder!r} is not an image-text folder: --image needs a folder exported from a "
                         "vision-language model (LLaVA, Gemma 3, Idefics 3).")
    if args.audio is not None:
        raise ValueError(f"{args.folder!r} is not a speech folder: --audio needs a folder exported from a speech "
                         "model (Whisper, Speech2Text, Moonshine...).")
    if (not args.prompts) == (args.ids is None):
        raise ValueError("Give a prompt or --ids 1,2,3 (one of them).")
    sampling = _sampling(args)
    generator = FolderGenerator(args.folder, threads=args.threads)
    generator.generator.speculation = _speculation(args)
    if len(args.prompts) > 1:
        _print_batch(generator.generate_texts(args.prompts, args.max_new_tokens, sampling, chat=args.chat))
        return 0
    if args.ids is not None:
        try:
            prompt: object = [int(i) for i in args.ids.split(",") if i.strip()]
        except ValueError:
            raise ValueError(f"--ids expects integers separated by commas, not {args.ids!r}.") from None
    else:
        prompt = args.prompt
    result = generator.generate_text(prompt, args.max_new_tokens, sampling, chat=args.chat,
                                     on_text=lambda text: print(text, end="", flush=True))
    if result.text is None:
        print(",".join(str(i) for i in result.new_ids))
    else:
        print()
    print(result.summary(), file=sys.stderr)
    times = result.times
    if generator.generator.speculation is not None:
        print(f"speculative: {times.target_runs} runs after the prompt for {times.decode_steps} tokens (mean "
              f"acceptance length {times.mean_acceptance_length:.2f}), {times.accepted} of {times.proposed} "
              "candidates accepted", file=sys.stderr)
    return 0


def _speculation(args: argparse.Namespace) -> Any:
    """The candidates of --prompt-lookup N or --draft FOLDER (fx2onnx.runtime.speculative), or None."""
    if args.prompt_lookup is None and not args.draft:
        return None
    from .runtime.speculative import DraftModel, PromptLookup, same_vocabulary

    if args.prompt_lookup is not None and args.draft:
        raise ValueError("Give --prompt-lookup or --draft, not both (as transformers).")
    if len(args.prompts) > 1:
        raise ValueError("--prompt-lookup and --draft generate one prompt at a time: give one prompt.")
    if args.prompt_lookup is not None:
        if args.prompt_lookup < 1:
            raise ValueError(f"--prompt-lookup takes a count of candidate tokens >= 1, not {args.prompt_lookup}.")
        return PromptLookup(args.prompt_lookup)
    if not os.path.isdir(args.draft):
        raise FileNotFoundError(f"--draft {args.draft!r} is not a folder: give a folder written by export from a "
                                "smaller model of the same tokenizer.")
    why = same_vocabulary(args.folder, args.draft)
    if why:
        raise ValueError(why + ".")
    return DraftModel(args.draft, threads=args.threads)


def _cmd_export(args: argparse.Namespace) -> int:
    import contextlib
    import os

    if os.path.isdir(args.model) and os.path.exists(os.path.join(args.model, "config.json")):
        return _export_checkpoint(args)

    import torch

    from .model_spec import load_model_spec

    bar = _steps(["load", "export", "validate"] if args.validate else ["load", "export"], enabled=not args.quiet)
    results = {}
    for step in bar:
        bar.set_description(step)
        if step == "load":
            spec = load_model_spec(args.model, with_cache=args.with_cache)
            dynamic_shapes = spec.dynamic_shapes if args.dynamic else None
            if args.dynamic and dynamic_shapes is None:
                raise ValueError(f"{args.model} defines no dynamic shapes: export it with --static or define them.")
            patches = spec.is_transformers if args.patches is None else args.patches
        elif step == "export":
            from . import torch_export_patches

            context = torch_export_patches(patch_transformers=True) if patches else contextlib.nullcontext()
            with context:
                if args.exporter == "to_onnx":
                    from . import to_onnx

                    to_onnx(spec.model, spec.args, spec.kwargs, dynamic_shapes=dynamic_shapes,
                            strict=args.strict, target_opset=args.opset, filename=args.out)
                else:
                    model = spec.model
                    if args.strict:  # torch.onnx.export has no strict option: capture first
                        from .models import export_dynamic_shapes

                        model = torch.export.export(
                            model, spec.args, spec.kwargs, strict=True,
                            dynamic_shapes=export_dynamic_shapes(dynamic_shapes),
                        )
                    program = torch.onnx.export(
                        model, spec.args, kwargs=spec.kwargs, dynamic_shapes=None if args.strict else dynamic_shapes,
                        opset_version=args.opset, dynamo=True, verbose=False,
                    )
                    program.save(args.out)
        else:
            from . import validate

            inputs = [(spec.args, spec.kwargs)]
            if dynamic_shapes is not None and spec.args2 is not None:
                inputs.append((spec.args2, spec.kwargs2))
            for i, (a, k) in enumerate(inputs):
                results[i] = validate(args.out, spec.model, a, k, atol=args.atol, rtol=args.rtol)
    kind = "dynamic" if dynamic_shapes is not None else "static"
    print(f"{args.model}: exported with {args.exporter} ({kind}, patches {'on' if patches else 'off'}) into {args.out}")
    for i, report in results.items():
        print(f"  {'first' if i == 0 else 'second'} input set: {report}")
    return 0 if all(r.ok for r in results.values()) else 1


def _cmd_validate(args: argparse.Namespace) -> int:
    from . import validate
    from .model_spec import load_model_spec

    spec = load_model_spec(args.model, with_cache=args.with_cache)
    inputs = [("first", spec.args, spec.kwargs)]
    if spec.args2 is not None and not args.first_only:
        inputs.append(("second", spec.args2, spec.kwargs2))
    ok = True
    for name, a, k in inputs:
        report = validate(args.onnx, spec.model, a, k, atol=args.atol, rtol=args.rtol)
        print(f"{args.onnx} vs {args.model}, {name} input set: {report}")
        ok = ok and report.ok
    return 0 if ok else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    import onnx

    from . import compare_onnx_execution
    from .model_spec import load_model_spec, random_feeds
    from .validation import make_feeds

    dims = {}
    for item in args.dim or []:
        name, _, value = item.partition("=")
        if not value.isdigit():
            raise ValueError(f"--dim expects name=value with an integer value, not {item!r}.")
        dims[name] = int(value)
    model1 = onnx.load(args.onnx1)
    if args.model:
        spec = load_model_spec(args.model, with_cache=args.with_cache)
        feeds = make_feeds(model1, spec.args, spec.kwargs)
    else:
        feeds = random_feeds(model1, dims, seed=args.seed)
    result = compare_onnx_execution(model1, args.onnx2, feeds, atol=args.atol, rtol=args.rtol)
    print(result.summary())
    first = result.first_divergence
    if first is None:
        return 0
    row = result.rows[first]
    print(f"first divergence: row {first}, {row.op_type1} {row.name1!r} vs {row.op_type2} {row.name2!r}, "
          f"max abs diff {row.max_abs_diff:g}")
    print(result.to_text(start=max(0, first - args.context), max_rows=2 * args.context + 1))
    return 1


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--with-cache", action="store_true", help="tiny architectures: add a past_key_values cache (a checkpoint folder of a causal LM has it by default)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance")


def _add_zoo_arguments(parser: argparse.ArgumentParser, exporters: list[str], timeout: float) -> None:
    """The options shared by the two zoos (scenarios and models): exporters, workers, timeout, cache."""
    parser.add_argument("--exporters", nargs="*", choices=exporters, help="exporters (default: all)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the local cluster (0: in this process)")
    parser.add_argument("--address", default=None,
                        help="the scheduler of a running dask cluster (tcp://host:8786), 'local' (a local cluster, "
                        "the default) or 'pool' (no engine); default: the environment variable FX2ONNX_CLUSTER")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds before a task is killed")
    parser.add_argument("--no-cache", action="store_true", help="run again even if the sources did not change")


_MODEL_HELP = "module:attribute (a function returning (model, inputs[, dynamic_shapes]), a Module "
_MODEL_HELP += "instance or class with example_inputs) or a tiny transformers architecture (llama, phi3...)"
_EXPORT_MODEL_HELP = _MODEL_HELP + ", or a save_pretrained folder (config.json and safetensors files)"


def _cmd_models(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .models.report import summary, write_page
    from .models.zoo import ROWS_FILE, build_rows, select_architectures, skipped_architectures

    rows_path = Path(args.out) / ROWS_FILE
    rows, meta = build_rows(
        rows_path, only=args.only, exporters=args.exporters or None, workers=args.workers,
        timeout=args.timeout, use_cache=not args.no_cache, missing_only=args.missing,
        generate_missing=args.generate_missing,
    )
    print(f"{meta['computed']} rows computed in {meta['duration']:.0f} s; {len(rows)} rows in {rows_path}")
    if args.page:
        write_page(rows, meta, args.page, skipped_architectures(), select_architectures())
        print(f"page written in {args.page}")
    for t in summary(rows):
        cache = "cache" if t["cache"] else "no cache"
        print(f"  {t['exporter']:<8} {cache:<9} run {t['run']:>3} captured {t['captured']:>3} "
              f"exported {t['exported']:>3} matched {t['matched']:>3}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog="python -m fx2onnx", description="fx2onnx command line")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    from .scenario_exporters import EXPORTERS

    scn = commands.add_parser(
        "scenarios",
        help="run the scenario zoo and write its rst pages",
        description="Exports every scenario with every exporter (static and dynamic), checks the "
        "results against eager, writes index.rst, the tables, the details and summary.png.",
    )
    scn.add_argument("--out", required=True, help="folder receiving the pages and rows.json")
    scn.add_argument("--cases", nargs="*", help="case names (default: all)")
    _add_zoo_arguments(scn, exporters=list(EXPORTERS), timeout=180.0)
    scn.set_defaults(func=_cmd_scenarios)

    exp = commands.add_parser(
        "export",
        help="export a model to ONNX and check it against eager",
        description="Exports a model with fx2onnx.to_onnx or torch.onnx.export(dynamo=True), then "
        "validates the ONNX model on onnxruntime against eager (and on a second input set of "
        "other shapes when the model is dynamic). Exit code 1 when the outputs differ.",
    )
    exp.add_argument("model", help=_EXPORT_MODEL_HELP)
    exp.add_argument("--out", required=True, help="the ONNX file to write")
    exp.add_argument("--exporter", choices=["to_onnx", "dynamo"], default="to_onnx", help="the exporter")
    shapes = exp.add_mutually_exclusive_group()
    shapes.add_argument("--dynamic", dest="dynamic", action="store_true", default=True,
                        help="use the model's dynamic shapes (default)")
    shapes.add_argument("--static", dest="dynamic", action="store_false", help="export with static shapes")
    patches = exp.add_mutually_exclusive_group()
    patches.add_argument("--patches", dest="patches", action="store_true", default=None,
                         help="export inside torch_export_patches(patch_transformers=True) "
                         "(default for tiny transformers architectures)")
    patches.add_argument("--no-patches", dest="patches", action="store_false", help="export without patches")
    exp.add_argument("--strict", action="store_true", help="strict mode of torch.export.export")
    exp.add_argument("--opset", type=int, default=None, help="ONNX opset (default: 20, 23 for the fused levels)")
    exp.add_argument("--no-validate", dest="validate", action="store_false", help="do not run the model")
    exp.add_argument("--quiet", action="store_true", help="no progress bar")
    exp.add_argument("--task", default=None, help="a checkpoint folder: the task (default: from the config's "
                     "architectures; text-generation)")
    exp.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                     help="a checkpoint folder: the type of the exported weights (default: float32, the type of "
                     "onnxruntime's CPU kernels)")
    exp.add_argument("--no-cache", action="store_true",
                     help="a checkpoint folder: a causal LM without its cache (it cannot generate)")
    exp.add_argument("--optimize", default=None, choices=["default", "onnxruntime", "opset23", "none"],
                     help="a checkpoint folder: the optimization level (default: onnxruntime)")
    exp.add_argument("--quantize", default=None, choices=["int4", "int8"],
                     help="a checkpoint folder: weight-only quantization into onnxruntime's MatMulNBits")
    exp.add_argument("--block-size", type=int, default=32, help="with --quantize: the values sharing one scale")
    exp.add_argument("--asymmetric", action="store_true",
                     help="with --quantize: asymmetric blocks (a zero point each: a little more accurate, "
                          "slower int4 kernels); symmetric by default")
    exp.add_argument("--concatenated-cache", action="store_true",
                     help="a causal LM concatenates its past and new keys at each step (the standard Attention) "
                          "instead of updating a buffer in place (onnxruntime's GroupQueryAttention, the default "
                          "at --optimize onnxruntime)")
    exp.add_argument("--capture-all-layers", action="store_true",
                     help="a checkpoint folder: trace every decoder layer with torch.export (by default a stack of "
                          "identical layers is captured with two, the others copied in ONNX)")
    exp.add_argument("--max-memory", default=None,
                     help="a checkpoint folder: refuse before loading an export estimated to need more memory "
                          "(16GB, 1.5GiB; the check against eager loads the model in float32)")
    exp.add_argument("--all-logits", action="store_true",
                     help="a causal LM: the logits of every position (to score a text); by default those of the "
                          "last position, all generation reads (the prompt's first token is faster)")
    _add_model_arguments(exp)
    exp.set_defaults(func=_cmd_export)

    gen = commands.add_parser(
        "generate",
        help="generate text with a folder written by export",
        description="Runs the decoder of a folder written by 'export FOLDER --out OUTDIR' on onnxruntime, the "
        "prompt encoded by the folder's tokenizer (offline), the text printed as it is decoded, then the tokens/s "
        "of the prefill and of the decoding. Greedy unless a sampling option is given. A folder exported from a "
        "speech model (Whisper, Speech2Text, Moonshine...) transcribes --audio talk.wav instead: its encoder once, its decoder greedily, the "
        "features made by the folder's feature extractor. A folder exported from a vision-language model (LLaVA, "
        "Gemma 3, Idefics 3) takes the prompt and --image cat.png, processed by the folder's processor; one exported "
        "from an image encoder-decoder (TrOCR, Donut) or a captioner (BLIP, Florence-2, GIT) takes --image (several: a batch) and at most one prompt "
        "(Donut's task prompt, BLIP's caption start, Florence-2's task: <CAPTION>), its decoder greedily. One exported from a speech language model (Granite Speech, "
        "VibeVoice-ASR, Voxtral) takes --audio and a prompt, or none: the processor's transcription request.",
    )
    gen.add_argument("folder", help="the folder written by export")
    gen.add_argument("prompts", nargs="*", default=[], metavar="prompt",
                     help="the text to continue; several prompts are generated as one batch (padded on the left), "
                     "each result printed after its number")
    gen.add_argument("--ids", default=None, help="token ids instead of a prompt, e.g. 1,2,3 (no tokenizer needed)")
    gen.add_argument("--max-new-tokens", type=int, default=32, help="the number of tokens to generate at most")
    gen.add_argument("--chat", action="store_true", help="the prompt as a user message in the tokenizer's chat template")
    gen.add_argument("--sample", action="store_true", help="sample (implied by --temperature/--top-k/--top-p/--seed)")
    gen.add_argument("--temperature", type=float, default=None, help="sampling: divides the logits (default 1)")
    gen.add_argument("--top-k", type=int, default=None, help="sampling: the k most likely tokens (default 50, 0: all)")
    gen.add_argument("--top-p", type=float, default=None, help="sampling: nucleus probability (default 1)")
    gen.add_argument("--seed", type=int, default=None, help="sampling: the seed (torch.manual_seed's draws)")
    gen.add_argument("--repetition-penalty", type=float, default=1.0, help="> 1: penalize the tokens already seen")
    gen.add_argument("--threads", type=int, default=None, help="onnxruntime's intra-op threads")
    gen.add_argument("--prompt-lookup", type=int, default=None, metavar="N",
                     help="prompt lookup decoding (transformers' prompt_lookup_num_tokens): each run of the model "
                     "verifies up to N candidate tokens copied from the text so far (greedy: the same tokens; sampled: "
                     "transformers' rule)")
    gen.add_argument("--draft", default=None, metavar="DRAFT_FOLDER",
                     help="speculative decoding (transformers' assistant_model): a folder exported from a smaller "
                     "model of the same tokenizer proposes tokens, each run of the model verifies them (greedy: the "
                     "same tokens; sampled: transformers' speculative sampling)")
    gen.add_argument("--audio", default=None, help="a speech folder (Whisper, Speech2Text...): the WAV file to transcribe (PCM, at the "
                     "rate of the feature extractor, 16 kHz for Whisper); a speech language model's folder: the audio of "
                     "the prompt (a.wav,b.wav: several)")
    gen.add_argument("--language", default=None, help="a Whisper folder: the language (fr, french; default: the "
                     "generation config's, else detected)")
    gen.add_argument("--task", default=None, choices=["transcribe", "translate"],
                     help="a Whisper folder: the task (default: the generation config's)")
    gen.add_argument("--print-ids", action="store_true", help="a speech, speech language model or image encoder-decoder folder: print the token ids, "
                     "not the text")
    gen.add_argument("--image", action="append", default=None,
                     help="an image-text folder (LLaVA, Gemma 3, Idefics 3, Qwen-VL...): an image of the prompt "
                     "(once per image, or a.png,b.png; a prompt without the processor's image token, <image> or "
                     "<start_of_image>, gets one per image in front); with several prompts, once per prompt "
                     "(a.png,b.png for two images of one prompt)")
    gen.add_argument("--video", action="append", default=None,
                     help="a Qwen2-VL, Qwen2.5-VL or Qwen3-VL folder: a video of the prompt, an animated GIF, PNG or WebP "
                     "(once per video; one prompt)")
    gen.set_defaults(func=_cmd_generate)

    val = commands.add_parser(
        "validate",
        help="run an ONNX file against the eager model",
        description="Runs the ONNX model with onnxruntime and the eager model on the same inputs "
        "(each input set the model defines) and prints the differences. Exit code 1 on a mismatch.",
    )
    val.add_argument("onnx", help="the ONNX file")
    val.add_argument("model", help=_MODEL_HELP)
    val.add_argument("--first-only", action="store_true", help="only the first input set")
    _add_model_arguments(val)
    val.set_defaults(func=_cmd_validate)

    cmp = commands.add_parser(
        "compare",
        help="compare two ONNX files result by result",
        description="Runs both models on the same inputs, aligns every intermediate result "
        "(fx2onnx.compare_onnx_execution) and prints the first divergence. Exit code 1 when the "
        "values diverge. Inputs come from --model, or are random with --dim name=value sizes.",
    )
    cmp.add_argument("onnx1", help="the first ONNX file (its inputs define the feeds)")
    cmp.add_argument("onnx2", help="the second ONNX file")
    cmp.add_argument("--model", help="take the inputs of this model: " + _MODEL_HELP)
    cmp.add_argument("--dim", action="append", help="random inputs: size of a named dimension, name=value (default 3)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    cmp.add_argument("--context", type=int, default=3, help="rows shown around the first divergence")
    _add_model_arguments(cmp)
    cmp.set_defaults(func=_cmd_compare)

    rep = commands.add_parser(
        "report",
        help="export every submodule on its own and write the report",
        description="Runs the model once, records the inputs of every submodule, exports each one "
        "alone (torch.export, conversion, onnxruntime against eager) and writes one row per "
        "submodule (CSV, or markdown when --out ends with .md). Exit code 1 if a submodule fails.",
    )
    rep.add_argument("model", help=_MODEL_HELP)
    rep.add_argument("--out", required=True, help="report file: .csv or .md")
    rep.add_argument("--exporter", default="to_onnx", choices=["to_onnx", "torch.export"])
    rep.add_argument("--max-depth", type=int, default=None, help="only submodules up to this depth")
    _add_model_arguments(rep)
    rep.add_argument("--static", action="store_true", help="ignore the dynamic shapes")
    rep.add_argument("--strict", action="store_true", help="torch.export.export(strict=True)")
    rep.add_argument("--no-progress", action="store_true", help="no progress bar")
    rep.set_defaults(func=_cmd_report)
    mdl = commands.add_parser(
        "models",
        help="export every discovered transformers architecture (the supported-models rows)",
        description="Builds a tiny model for every text architecture of transformers' auto mappings, "
        "exports it with each exporter without and with a cache, validates it on other shapes and "
        "merges the rows into a JSON file (the supported-models page is rendered from it).",
    )
    mdl.add_argument("--out", default="_doc/models", help="folder of the rows file rows.json, updated in place")
    mdl.add_argument("--page", help="folder receiving the page (index.rst, summary.png)")
    mdl.add_argument("--only", help="regular expression on the architecture names (model types)")
    _add_zoo_arguments(mdl, exporters=["to_onnx", "dynamo"], timeout=300.0)
    mdl.add_argument("--missing", action="store_true", help="run only the rows absent from the rows file or killed by a timeout")
    mdl.add_argument("--generate-missing", action="store_true",
                     help="run only the decoders matched with a cache that have no generate column yet")
    mdl.set_defaults(func=_cmd_models)
    return parser


def _quiet_imports() -> None:
    """No import noise on a command's output: transformers imports torchao (installed beside
    executorch), which logs its missing CUDA kernels and torch's pytree deprecations."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses ``argv`` and runs the command; returns the exit code (2 and one line on stderr
    for an input the command refuses: a folder of an unsupported task, a missing file...; 1 and the
    error's first line with the source line to change when the model cannot be captured or converted)."""
    args = make_parser().parse_args(argv)
    _quiet_imports()
    if getattr(args, "address", None):  # the sweeps' runner reads it (fx2onnx.runner.run_tasks)
        os.environ["FX2ONNX_CLUSTER"] = args.address
    from .convert.errors import ConversionError, ExportError

    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM during an export: its temporary folder is already removed
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        print("error: interrupted" + (": nothing was written" if args.command == "export" else ""), file=sys.stderr)
        return 130
    except (ExportError, ConversionError) as e:
        # the model could not be captured or converted: its first line, then where the model's code does what
        # cannot be captured and the fix (the explanation's lines), not torch's traceback
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        lines = str(e).splitlines() or [type(e).__name__]
        hints = [line for line in lines[1:] if line.startswith(("The model reads", "Where the code", "  "))]
        print("\n".join([f"error: {lines[0]}", *hints[:6],
                         "(FX2ONNX_TRACEBACK=1 shows the whole error)"]), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
