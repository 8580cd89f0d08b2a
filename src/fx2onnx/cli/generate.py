"""``python -m fx2onnx generate FOLDER [prompt...]``: a folder written by export answering a prompt, an image or an
audio; the loop is the one of the folder's task (``fx2onnx.json``). Imports the runtime only: no torch at start."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..runtime.families import generator_class
from ..runtime.folder import FOLDER_METADATA, FolderGenerator, _read_json
from ..runtime.integrity import check_folder_files
from ..runtime.media_check import check_media
from ..runtime.mtp import MultiTokenPrediction
from ..runtime.pipelines import PIPELINE_TASKS
from ..runtime.sampling import Sampling
from ..runtime.seq2seq import TEXT2TEXT_TASKS
from ..runtime.speculative import DraftModel, PromptLookup, same_vocabulary


def _generate_speech(args: argparse.Namespace) -> int:
    """Transcribes --audio with a folder exported from a speech-seq2seq checkpoint (fx2onnx.runtime.speech:
    Whisper; fx2onnx.runtime.speech_seq2seq: the others)."""

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
    generator = generator_class("speech-seq2seq", args.split)(args.folder, threads=args.threads)
    result = generator.transcribe(args.audio, args.max_new_tokens, language=args.language, task=args.task,
                                  on_text=lambda text: print(text, end="", flush=True), as_text=not args.print_ids)
    if result.texts is None:
        print(",".join(str(i) for i in result.new_ids[0]))
    else:
        print()
    print(result.summary(), file=sys.stderr)
    return 0


def _generate_text2text(args: argparse.Namespace, task: str) -> int:
    """Greedy generation after one or several prompts (or --ids) with a folder exported from a text encoder-decoder
    (T5, BART, Marian: fx2onnx.runtime.seq2seq)."""
    if args.image or args.video or args.audio is not None:
        raise ValueError(f"{args.folder!r} holds a text encoder-decoder ({task}): it takes prompts or --ids only.")
    if (not args.prompts) == (args.ids is None):
        raise ValueError("Give a prompt (several make a batch) or --ids 1,2,3 (one of them).")
    if _asks_sampling(args) or args.prompt_lookup is not None or args.draft or args.mtp:
        raise ValueError("A text encoder-decoder folder generates greedily: remove the sampling and speculative "
                         "options.")
    generator = generator_class(task, None)(args.folder, threads=args.threads)
    if args.ids is not None:
        try:
            prompt: Any = [[int(i) for i in args.ids.split(",") if i.strip()]]
        except ValueError:
            raise ValueError(f"--ids expects integers separated by commas, not {args.ids!r}.") from None
    else:
        prompt = list(args.prompts)
    result = generator.generate_text(prompt, args.max_new_tokens, as_text=not args.print_ids)
    for ids, text in zip(result.new_ids, result.texts or [None] * len(result.new_ids)):
        print(",".join(str(i) for i in ids) if text is None else text)
    print(result.summary(), file=sys.stderr)
    return 0


def _generate_audio_text(args: argparse.Namespace) -> int:
    """Generates after --audio (and a prompt, else the processor's transcription request) with a folder
    exported from a speech language model (fx2onnx.runtime.audio_text: Granite Speech, VibeVoice-ASR...)."""

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
    generator = generator_class("speech-seq2seq", args.split)(args.folder, threads=args.threads)
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
    # an encoder-decoder (fx2onnx.runtime.image_seq2seq), or GIT's image features in front of the prompt
    generator = generator_class("image-text-to-text", args.split)(args.folder, threads=args.threads)
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
    generator = generator_class("image-text-to-text", args.split)(args.folder, threads=args.threads)
    if len(args.prompts) > 1:
        _print_batch(generator.generate_texts(args.prompts, images, args.max_new_tokens, sampling, chat=args.chat))
        return 0
    result = generator.generate_text(args.prompt, images[0], args.max_new_tokens,
                                     on_text=lambda text: print(text, end="", flush=True), sampling=sampling,
                                     chat=args.chat, videos=videos)
    print()
    print(result.summary(), file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    args.prompt = args.prompts[0] if len(args.prompts) == 1 else None
    metadata = _read_json(os.path.join(args.folder, FOLDER_METADATA))
    # before onnxruntime loads anything: the folder as the export wrote it, the files given decode
    check_folder_files(args.folder, metadata)
    # which loop of the task's: the generic encoder-decoder split, a speech language model's placeholders
    task, args.split = metadata.get("task"), metadata.get("split")
    if task in PIPELINE_TASKS:  # one pass, nothing generated
        raise ValueError(f"{args.folder!r} is a folder of task {task!r}: run it with python -m fx2onnx run FOLDER "
                         "INPUT...")
    if task in TEXT2TEXT_TASKS:
        return _generate_text2text(args, task)
    if task == "speech-seq2seq" and args.audio:
        check_media(audios=[args.audio])
    if task == "image-text-to-text":
        check_media(images=args.image or [], videos=args.video or [])
    if (args.prompt_lookup is not None or args.draft or args.mtp) and task in ("speech-seq2seq", "image-text-to-text"):
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
    if args.prompt_lookup is None and not args.draft and not args.mtp:
        return None

    if (args.prompt_lookup is not None) + bool(args.draft) + bool(args.mtp) > 1:
        raise ValueError("Give one of --prompt-lookup, --draft and --mtp (as transformers: one source of candidates).")
    if args.mtp:
        if len(args.prompts) > 1:
            raise ValueError("--mtp generates one prompt at a time: give one prompt.")
        return MultiTokenPrediction(args.folder, threads=args.threads)
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


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
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
    gen.add_argument("--mtp", action="store_true",
                     help="multi-token prediction (transformers' use_mtp): the head exported with the folder from "
                     "a checkpoint holding one (DeepSeek V3, GLM-4-MoE) proposes a token each run verifies")
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
    gen.set_defaults(func=run)
