"""Rows of :mod:`fx2onnx.zoo.library_zoo` -> one page per library (timm, diffusers, transformers tasks).

Same conventions as the transformers page (:mod:`fx2onnx.zoo.report`): a summary per exporter
and shapes, the failures first, one sortable table, each failing cell linked to its error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from ..scenarios.report import grid_table
from .report import STEP_LETTERS, capture_check_sentence, error_text  # noqa: F401 (importable from here)
from .task_generate import GENERATE_TASKS
from .architectures import EXPORTERS

#: what each library's page says of its models
INTRO = {
    "timm": (
        "Every model family of :epkg:`timm`'s registry (``timm.list_models()``, grouped by the module defining "
        "each model) is represented by its smallest model (fewest parameters among the names with the smallest "
        "size words), created with random weights (``pretrained=False``, 10 classes) at its default image size. "
        "*batch*: exported with a dynamic batch (2 images), checked on 3 images; *image*: dynamic batch, height "
        "and width (vision transformers created with ``dynamic_img_size=True`` when they accept it), checked on "
        "3 images of another height and width. timm needs torchvision, whose PyPI wheel is a CUDA build: "
        ":mod:`fx2onnx.torchvision_cpu` makes it importable beside the CPU torch. ``to_onnx`` applies the timm "
        "rewrites by itself (:mod:`fx2onnx.patches.timm_fixes`: sizes kept symbolic, shortcuts taken at one "
        "window size replaced by the general branch)."
    ),
    "diffusers": (
        "Every model class of :epkg:`diffusers` (the ``ModelMixin`` subclasses of ``diffusers.models``) is "
        "discovered; an autoencoder gives two entry points, ``encode`` and ``decode``. The classes users export "
        "(Stable Diffusion's UNet and ControlNet, the autoencoders, SD3, Flux, DiT, PixArt and Sana transformers) "
        "have a tiny configuration and seeded random weights (the projections diffusers initializes to zero get "
        "small random values, so that no output is trivially zero); the others are listed with step "
        "*config* (no tiny configuration yet). *batch*: dynamic batch; *image*: dynamic latent height and width "
        "too (the number of packed tokens for Flux), checked on a latent 8 wider and higher. ``to_onnx`` applies the "
        "diffusers rewrites by itself (:mod:`fx2onnx.patches.diffusers_fixes`: the position table of "
        "``PatchEmbed`` computed from the latent size)."
    ),
}


def _label(row: dict[str, Any]) -> str:
    name = row["architecture"].replace(".", "-").replace("_", "-").replace("/", "-")
    return f"lib-{row['library']}-{name}-{row['exporter']}-{row['shapes']}".lower()


def is_stale(row: dict[str, Any]) -> bool:
    """A row computed before the weights hiding a branch were spread (see :func:`_spread_sentence`);
    ``python -m fx2onnx.zoo.library_zoo LIBRARY --stale`` reruns them. A row which timed out or
    crashed checked nothing, whenever it ran (``--missing`` reruns it)."""
    return row.get("spread") is None and row["step"] not in ("config", "model", "timeout", "crash")


def _stale_label(row: dict[str, Any]) -> str:
    return f"lib-{row['library']}-code-{row.get('hash', '?')[:8]}"


def _cell(row: dict[str, Any] | None) -> str:
    """✔ and the difference, or ✘ and the step linked to the error; a stale row ends with a † linked to
    the code hash it ran with."""
    if row is None:
        return "–"
    stale = f" :ref:`† <{_stale_label(row)}>`" if is_stale(row) else ""
    if row["success"]:
        if row.get("float64"):  # eager float32 was off, the ONNX model within the tolerance of float64
            return f"✔ {row['float64']['onnx_max_abs']:.0e} (float64){stale}"
        return f"✔ {row['max_abs']:.0e}{stale}"
    return f":ref:`✘ {STEP_LETTERS.get(row['step'], '?')} <{_label(row)}>`{stale}"


def _stale_lines(rows: Sequence[dict[str, Any]], name: Any) -> list[str]:
    """The stale rows grouped by the code hash they ran with (``hash``: :func:`fx2onnx.runner.sources_hash`
    of fx2onnx's sources and the key packages' versions), each group with its anchor."""
    stale = [r for r in rows if is_stale(r)]
    if not stale:
        return []
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in stale:
        groups.setdefault(r.get("hash", "?"), []).append(r)
    lines = ["Rows run before the weights were spread", "---------------------------------------", "",
             f"The {len(stale)} rows marked † in the tables ran before the spreading of the weights described "
             "above, with the code whose hash is given (:func:`fx2onnx.runner.sources_hash`: fx2onnx's sources and "
             "the versions of the key packages). They have not been run again since; ``--stale`` reruns them "
             "(``--missing`` does not).", ""]
    for code, mine in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        lines += [f".. _{_stale_label(mine[0])}:", "",
                  f"* code ``{code[:8]}`` ({len(mine)} rows): "
                  + ", ".join(f"``{name(r)}`` ({', '.join(x for x in (r['exporter'], r.get('shapes')) if x)})"
                              for r in sorted(mine, key=lambda r: (name(r), r["exporter"], r.get("shapes") or ""))),
                  ""]
    return lines


#: what the marks of a table's cell mean
_MARKS = (
    "✔ and the maximum absolute difference with eager, followed by *float64* when the ONNX model differs from "
    "eager float32 but is within the tolerance of eager run in float64 (float32 eager is not always); ✘ and the "
    "step which failed (" + ", ".join(f"**{letter}** {step}" for step, letter in STEP_LETTERS.items()) + "); "
    "† a row run before the weights were spread, linked to the code it ran with."
)


def library_summary(rows: Sequence[dict[str, Any]], discovered: int | None = None) -> list[dict[str, Any]]:
    """Per exporter x shapes: models discovered, run (built), captured, exported, matched."""
    table = []
    for exporter in EXPORTERS:
        for shapes in ("batch", "image"):
            mine = [r for r in rows if r["exporter"] == exporter and r["shapes"] == shapes]
            if not mine:
                continue
            built = [r for r in mine if r["step"] not in ("config", "model")]
            table.append(dict(
                exporter=exporter, shapes=shapes, discovered=discovered or len(mine), run=len(built),
                captured=sum(r["step"] != "capture" for r in built),
                exported=sum(r["step"] not in ("capture", "conversion") for r in built),
                matched=sum(r["success"] for r in mine),
            ))
    return table


def computed_by(meta: dict[str, Any], rows: Sequence[dict[str, Any]], versions: str) -> str:
    """Which command computed the rows: a run restricted by ``--only`` (or resuming with ``--missing``,
    ``--stale``...) computed some of them, the others come from earlier runs of the same zoo."""
    command = meta.get("command", "?")
    date = meta.get("date", "?")
    match = re.search(r"\s--only\s+(?:'([^']*)'|\"([^\"]*)\"|(\S+))", command)
    if match is None and not re.search(r"\s--(missing|stale|generate|regenerate)", command):
        return f"Computed by ``{command}`` on {date} ({versions})."
    base = command.split(" --", 1)[0]
    names = sorted({r["architecture"] for r in rows})
    if match is not None:
        pattern = next(g for g in match.groups() if g is not None)
        try:
            last = sum(bool(re.search(pattern, "/" + n.split("/", 1)[-1]) or re.search(pattern, n)) for n in names)
        except re.error:
            last = None
        what = f"restricted by ``--only`` to {last} of the {len(names)} architectures" if last is not None else \
            "restricted by ``--only``"
    else:
        what = f"``{command[len(base):].strip()}``"
    return (f"Computed by runs of ``{base}``, each over some of the architectures; the last one, on {date} "
            f"({versions}), was {what}, the other rows come from earlier runs.")


def library_page(library: str, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The rst page of one library."""
    title = f"{library} models"
    lines = [title, "=" * len(title), "", INTRO[library], ""]
    versions = ", ".join(f"{k} {meta[k]}" for k in ("torch", library, "torchvision") if k in meta)
    lines += [computed_by(meta, rows, versions) + f" The rows are committed (``_doc/models/rows_{library}.json``).", ""]
    lines += [".. list-table:: Models per exporter and shapes", "    :header-rows: 1", "",
              "    * - exporter\n      - shapes\n      - discovered\n      - built\n      - captured\n"
              "      - exported\n      - matched"]
    for t in library_summary(rows, len(meta.get("discovered", {})) or None):
        lines.append(f"    * - ``{t['exporter']}``\n      - {t['shapes']}\n      - {t['discovered']}\n      - {t['run']}"
                     f"\n      - {t['captured']}\n      - {t['exported']}\n      - {t['matched']}")
    lines += ["", "*built*: the tiny model was created and its eager forward ran on both input sets (a model "
              "rejecting the second image size is not built for *image*).", ""]
    lines += [_spread_sentence(rows), "", capture_check_sentence(rows), ""]
    shapes = [s for s in ("batch", "image") if any(r["shapes"] == s for r in rows)]
    columns = [(e, s) for e in EXPORTERS for s in shapes]
    index = {(r["architecture"], r["exporter"], r["shapes"]): r for r in rows}
    names = sorted({r["architecture"] for r in rows})
    built = [n for n in names if any(index.get((n, e, s), {}).get("step") != "config" for e, s in columns)]
    failing = [r for r in rows if not r["success"] and r["step"] not in ("config",)]
    lines += ["Per model", "---------", "",
              _MARKS, ""]
    body = []
    for name in built:
        model = next(r.get("model", name) for r in rows if r["architecture"] == name)
        params = next((r["parameters"] for r in rows if r["architecture"] == name and r.get("parameters")), None)
        size = f"{params / 1e6:.1f} M" if params else "?"
        body.append([f"``{name}``", f"``{model}``", size] + [_cell(index.get((name, e, s))) for e, s in columns])
    groups = [(e, tuple(shapes)) for e in EXPORTERS]
    lines += grid_table(["family" if library == "timm" else "entry point", "model", "parameters"], groups, body,
                        "fx-matrix fx-sortable fx-filterable")
    if failing:
        lines += ["Errors", "------", ""]
        for r in sorted(failing, key=lambda r: (r["architecture"], r["exporter"], r["shapes"])):
            lines += [f".. _{_label(r)}:", "", f"**{r['architecture']}**, {r['exporter']}, {r['shapes']}, "
                      f"step *{r['step']}*: {error_text(r['error'])}", ""]
    lines += _stale_lines(rows, lambda r: r["architecture"])
    not_run = sorted(set(meta.get("discovered", {})) - set(built))
    if not_run:
        why = ("no tiny configuration yet (``fx2onnx.zoo.diffusers_models.TINY``)" if library == "diffusers"
               else "not run yet (``--missing`` goes on where the last run stopped)")
        lines += ["Without rows", "------------", "",
                  f"{len(not_run)} of the {len(meta['discovered'])} discovered entries have no row, {why}: "
                  + ", ".join(f"``{n}``" for n in not_run) + ".", ""]
    return "\n".join(lines)


def _spread_sentence(rows: list[dict[str, Any]]) -> str:
    """How many rows ran with the weights that hide a branch given random values."""
    spread = sum(r.get("spread") is not None for r in rows)
    stale = sum(is_stale(r) for r in rows)
    head = ("Before anything runs, the weights a library initializes toward the identity (layer scales of 1e-5, "
            "heads scaled to 1e-4, zero-initialized norms and position tables) get seeded random values "
            "(:func:`fx2onnx.zoo.checkable.spread_degenerate_weights`): with them a whole branch adds nothing "
            "to the outputs and the comparison with eager could not see it computed wrong. "
            f"{spread} of the {len(rows)} rows ran so")
    if not stale:
        return head + ("; the others checked nothing (a model never built, a row which timed out or crashed)."
                       if spread < len(rows) else ".")
    return head + (f"; the {stale} rows marked † ran before and may have been checked with such weights (the rows "
                   "of models never built have nothing to spread).")


#: what the page of the transformers tasks says of its rows
TASKS_INTRO = (
    "Every task of :epkg:`transformers` beyond the text models (:mod:`fx2onnx.inputs.tasks`): the architectures "
    "of the auto mappings of each task (``MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES``...), an architecture "
    "listed by two tasks gets a row in each. Each one is built from a tiny configuration (the sizes of the text "
    "zoo and small images and spectrograms, applied to every sub-configuration: text, vision, audio, backbone), "
    "with seeded random weights, and its inputs are built per task (:mod:`fx2onnx.zoo.task_inputs`: images, "
    "videos, spectrograms or waveforms, prompts with one placeholder token per image feature, token boxes, time "
    "series; a model with a ``get_rope_index``, Qwen-VL's, gets the multimodal positions it computes as its "
    "``position_ids`` input, as the generation loop of an exported folder does). Exported with a dynamic batch (2) under ``torch_export_patches(patch_transformers=True)``, checked "
    "against eager on a batch of 3. A model whose eager forward gives two results on the same inputs (dropout or "
    "noise in eval mode) stops at step *model*: no export can be compared with it."
)


def task_summary(rows: Sequence[dict[str, Any]], discovered: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per task: architectures discovered, built (the tiny model, its inputs and its eager forward),
    captured (torch.export succeeded for one exporter at least), exported and matched per exporter."""
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for key in discovered or {}:
        by_task.setdefault(key.split("/", 1)[0], {}).setdefault(key, {})
    for r in rows:
        by_task.setdefault(r["task"], {}).setdefault(r["architecture"], {})[r["exporter"]] = r
    table = []
    for task, archs in sorted(by_task.items()):
        done = [a for a in archs.values() if a]
        # a row which timed out or crashed says neither (the step it reached is unknown)
        built = [a for a in done if any(r["step"] in ("capture", "conversion", "validation", None)
                                        for r in a.values())]
        entry = dict(task=task, discovered=len(archs), run=len(done), built=len(built),
                     captured=sum(any(r["step"] in ("conversion", "validation", None) for r in a.values())
                                  for a in built))
        for exporter in EXPORTERS:
            mine = [a[exporter] for a in done if exporter in a]
            entry[f"{exporter}_run"] = len(mine)
            entry[f"{exporter}_exported"] = sum(r["step"] in ("validation", None) for r in mine)
            entry[f"{exporter}_matched"] = sum(r["success"] for r in mine)
        table.append(entry)
    return table


def _generate_label(row: dict[str, Any]) -> str:
    return _label(row) + "-generate"


def _generate_cell(row: dict[str, Any] | None) -> str:
    """``=`` and the tokens compared when the folder generated transformers' tokens, ``≠`` and the step
    linked to the reason otherwise, ``–`` for a row without the entry (not matched, not run)."""
    entry = (row or {}).get("generate")
    if not entry:
        return "–"
    if entry.get("equal"):
        return f"= {entry['new_tokens']}"
    step = entry.get("error", "?").split(":", 1)[0]
    return f":ref:`≠ {step} <{_generate_label(row)}>`"


def _generate_lines(rows: Sequence[dict[str, Any]], task: str = "image-text-to-text") -> list[str]:
    """The sentence on the ``generate`` column and the reason of every row which did not generate."""
    done = [r for r in rows if r.get("generate")]
    if not done:
        return []
    equal = sum(bool(r["generate"].get("equal")) for r in done)
    pieces, inputs = ("a vision piece and a decoder with its cache", "one prompt with one image")
    if task == "speech-seq2seq":
        pieces, inputs = ("an encoder piece and a decoder with its cache; a speech language model: an audio piece and "
                          "a decoder writing its features over the prompt's placeholders",
                          "the audio features of one input (and its prompt)")
    else:
        pieces += " (an encoder-decoder: an encoder piece and a decoder with its cache)"
        inputs += " (an encoder-decoder: the image alone)"
    started = sorted(r["architecture"].split("/", 1)[1] for r in done if r["generate"].get("start_token") is not None)
    start = (f" The tiny configurations of {', '.join(started)} name no decoder start token (their checkpoints do): "
             "set as a checkpoint would, the decoder's ``bos_token_id``, else the pad token, else 0."
             if started else "")
    lines = [f"*generate* (:mod:`fx2onnx.zoo.task_generate`): the matched model written as a ``save_pretrained`` "
             f"folder, exported by ``python -m fx2onnx export`` ({pieces}, each checked against eager), then "
             f"generating greedily on {inputs}: **= n**, the n new tokens equal to transformers' ``generate``. "
             f"{equal} of {len(done)} equal.{start}", ""]
    failing = [r for r in done if not r["generate"].get("equal")]
    if failing:
        lines += ["Generation:", ""]
        for r in sorted(failing, key=lambda r: r["architecture"]):
            lines += [f".. _{_generate_label(r)}:", "",
                      f"**{r['architecture'].split('/', 1)[1]}**: {error_text(r['generate'].get('error', '?'))}", ""]
    return lines


def _folder_by_task(folder: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The rows of the folder sweep (``bench/sweep_folder_tasks.py``) by task of this page, and the pairs not run."""
    by_task: dict[str, dict[str, Any]] = {}
    for r in (folder or {}).get("rows", []):
        by_task.setdefault(r["architecture"].split("/", 1)[0], {"rows": [], "not_run": []})["rows"].append(r)
    for key in (folder or {}).get("not_run", []):
        by_task.setdefault(key.split("/", 1)[0], {"rows": [], "not_run": []})["not_run"].append(key.split("/", 1)[1])
    return by_task


def _folder_cell(entry: dict[str, Any] | None) -> str:
    """``equal / run`` of a task in the folder sweep, ``-`` for a task no folder exports."""
    if entry is None:
        return "-"
    return f"{sum(bool(r.get('equal')) for r in entry['rows'])} / {len(entry['rows'])}"


def _folder_lines(entry: dict[str, Any], folder: dict[str, Any]) -> list[str]:
    """The folder sweep's count for one task, each failure with its reason, the pairs not run."""
    rows = entry["rows"]
    lines = [f"**Folder** (``export FOLDER`` with no flag, then ``run`` against ``transformers.pipeline`` on the same "
             f"inputs): {sum(bool(r.get('equal')) for r in rows)} of {len(rows)} equal "
             f"(``bench/sweep_folder_tasks.py``, {folder.get('date', '?')}).", ""]
    for r in sorted((r for r in rows if not r.get("equal")), key=lambda r: r["architecture"]):
        lines += [f"* ``{r['architecture'].split('/', 1)[1]}``, step *{r.get('step')}*: "
                  f"{error_text(r.get('error') or 'not equal')}" + (f" (an older run: {r['run_on']})"
                                                                    if r.get("run_on") else "")]
    if any(not r.get("equal") for r in rows):
        lines.append("")
    if entry["not_run"]:
        lines += [f"Folder not run yet ({len(entry['not_run'])}): "
                  + ", ".join(f"``{n}``" for n in sorted(entry["not_run"])) + ".", ""]
    return lines


#: pipeline task -> the task of optimum's exporter it is counted in: optimum's feature-extraction exports the base
#: model of any modality, transformers' pipelines run the text ones as feature-extraction, the image ones as
#: image-feature-extraction
COUNTED_IN = {"image-feature-extraction": "feature-extraction"}


def removed_model_types(types: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per task, the model types of ``types`` (optimum's, ``-`` for ``_``) the installed transformers has no
    configuration for (MCTCT, removed in transformers 5; optimum's own names of a part of a model, ``siglip-text``): no
    folder can count them; ``{}`` without transformers."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # deferred: heavy
    except ImportError:
        return {}
    known = {name.replace("_", "-") for name in CONFIG_MAPPING_NAMES}
    return {task: sorted(t for t in found if t.replace("_", "-") not in known) for task, found in sorted(types.items())
            if any(t.replace("_", "-") not in known for t in found)}


def _folder_table(folder: dict[str, Any]) -> list[str]:
    """Per pipeline task: the model types whose folder equals transformers' pipeline, exported, run, beside the
    model types optimum's ONNX exporter registers for the task (and how many of those are equal here); *counted*:
    the model types equal here for the task or a task counted in it (:data:`COUNTED_IN`)."""
    optimum = folder.get("optimum") or {}
    types = optimum.get("model_types", {})
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in folder.get("rows", []):
        rows.setdefault(r["task"], []).append(r)
    equal_types = {task: {r["architecture"].split("/", 1)[1].replace("_", "-") for r in mine if r.get("equal")}
                   for task, mine in rows.items()}
    counted = {task: set(found) for task, found in equal_types.items() if task not in COUNTED_IN}
    for task, into in COUNTED_IN.items():
        counted.setdefault(into, set()).update(equal_types.get(task, set()))
    head = ["pipeline task", "equal", "exported", "run", "not run", "counted", "optimum registers", "of which counted"]
    lines = [".. list-table:: Folders per pipeline task, beside optimum", "    :header-rows: 1",
             "    :class: fx-summary", "", "    * - " + "\n      - ".join(head)]
    not_run: dict[str, int] = {}
    for key in folder.get("not_run", []):
        task = folder.get("tasks_of", {}).get(key.split("/", 1)[0], key.split("/", 1)[0])
        not_run[task] = not_run.get(task, 0) + 1
    for task in sorted(set(rows) | set(not_run)):
        mine = rows.get(task, [])
        theirs, mine_counted = set(types.get(task, [])), counted.get(task, set())
        cells = [task, len(equal_types.get(task, ())), sum(r.get("step") in ("run", "compare") for r in mine),
                 len(mine), not_run.get(task, 0), f"in {COUNTED_IN[task]}" if task in COUNTED_IN else len(mine_counted),
                 "-" if task in COUNTED_IN else len(theirs) if task in types else "?",
                 "-" if task in COUNTED_IN else len(mine_counted & theirs) if task in types else "?"]
        lines.append("    * - " + "\n      - ".join(str(c) for c in cells))
    lines += ["", f"*equal*: model types whose tiny folder, exported with no flag, gives what ``transformers.pipeline`` "
              f"gives; *optimum registers*: the model types ``{optimum.get('version', 'optimum-onnx')}``'s "
              "``TasksManager`` lists for the task's ONNX export (its own environment; a registered model type is "
              "not a checked one), its image-segmentation counting its semantic-segmentation, and a task optimum "
              "names by a wider one (mask-generation by feature-extraction, zero-shot-classification by "
              "text-classification, document-question-answering by question-answering) the model types of "
              "transformers' mapping of the task it registers for that one; *counted*: the model "
              "types equal here counted for optimum's task: its feature-extraction exports the base model of any "
              "modality, which transformers' pipelines run as feature-extraction (texts) or image-feature-extraction "
              "(images), so a model type counts there when the folder of its base model equals the pipeline of its "
              "modality (the audio base models have no pipeline in transformers and are not counted)."
              + _removed_sentence(removed_model_types(types)), ""]
    return lines


def _removed_sentence(removed: dict[str, list[str]]) -> str:
    """The model types optimum registers that the installed transformers has no configuration for, by task (or
    nothing)."""
    if not removed:
        return ""
    import transformers  # deferred: heavy (removed_model_types found them with it)

    listed = "; ".join(f"{task}: " + ", ".join(f"``{t}``" for t in found) for task, found in removed.items())
    return (f" optimum registers model types transformers {transformers.__version__} has no configuration for "
            "(removed since, as MCTCT, or optimum's names of a part of a model), which no folder can count "
            f"({listed}).")


def tasks_page(rows: Sequence[dict[str, Any]], meta: dict[str, Any], folder: dict[str, Any] | None = None) -> str:
    """The rst page of the transformers tasks: a summary, then one section per task; ``folder``: the rows of the
    folder sweep (``_doc/bench/folder_tasks.json``), a *folder* column and a paragraph per task."""
    folders = _folder_by_task(folder)
    title = "transformers tasks"
    lines = [title, "=" * len(title), "", TASKS_INTRO, ""]
    versions = ", ".join(f"{k} {meta[k]}" for k in ("torch", "transformers") if k in meta)
    lines += [computed_by(meta, rows, versions) + " The rows are committed (``_doc/models/rows_tasks.json``).", ""]
    summary = task_summary(rows, meta.get("discovered"))
    head = ["task", "discovered", "run", "built", "captured"] + [
        f"{e} {what}" for e in EXPORTERS for what in ("exported", "matched")] + (["folder"] if folder else [])
    lines += [".. list-table:: Architectures per task", "    :header-rows: 1", "    :class: fx-summary", ""]
    lines.append("    * - " + "\n      - ".join(head))
    totals = dict.fromkeys(head[1:], 0)
    for t in summary:
        cells = [f":ref:`{t['task']} <lib-tasks-{t['task']}>`", t["discovered"], t["run"], t["built"], t["captured"]]
        cells += [t[f"{e}_{what}"] for e in EXPORTERS for what in ("exported", "matched")]
        for name, value in zip(head[1:], cells[1:]):
            totals[name] += value
        cells += [_folder_cell(folders.get(t["task"]))] if folder else []
        lines.append("    * - " + "\n      - ".join(str(c) for c in cells))
    if folder:
        every = [r for entry in folders.values() for r in entry["rows"]]
        totals["folder"] = f"{sum(bool(r.get('equal')) for r in every)} / {len(every)}"
    lines.append("    * - **all**\n      - " + "\n      - ".join(f"**{v}**" for v in totals.values()))
    lines += ["", "*run*: the architectures with rows (the others are not run yet); *built*: the tiny model was "
              "created, its inputs built and its eager forward ran; *captured*: ``torch.export`` captured it for "
              "one exporter at least (a row which timed out counts as run, neither built nor captured); *exported*: the exporter returned a model; *matched*: onnxruntime's results "
              "on the other batch match eager's." + (" *folder*: the tiny model saved as a checkpoint folder with a "
              "processor made in code, exported with ``python -m fx2onnx export FOLDER`` and run by ``python -m fx2onnx run``, equal "
              "to ``transformers.pipeline`` of the task on the same inputs (equal / run; ``-``: a task no folder "
              "exports yet)." if folder else ""), "", _spread_sentence(rows), "", capture_check_sentence(rows), ""]
    if folder:
        lines += _folder_table(folder)
    index = {(r["architecture"], r["exporter"]): r for r in rows}
    lines += [_MARKS, ""]
    for t in summary:
        task = t["task"]
        names = sorted({r["architecture"] for r in rows if r["task"] == task})
        lines += [f".. _lib-tasks-{task}:", "", task, "-" * len(task), ""]
        body = []
        generates = task in GENERATE_TASKS
        for name in names:
            mine = [r for r in rows if r["architecture"] == name]
            params = next((r["parameters"] for r in mine if r.get("parameters")), None)
            body.append([f"``{name.split('/', 1)[1]}``", f"``{mine[0]['model']}``",
                         f"{params / 1e6:.2f} M" if params else "?"]
                        + [_cell(index.get((name, e))) for e in EXPORTERS]
                        + ([_generate_cell(index.get((name, "to_onnx")))] if generates else []))
        if body:
            groups = [("batch", tuple(EXPORTERS))] + ([("folder", ("generate",))] if generates else [])
            lines += grid_table(["architecture", "model class", "parameters"], groups, body,
                                "fx-matrix fx-sortable fx-filterable")
        if generates:
            lines += _generate_lines([r for r in rows if r["task"] == task and r["exporter"] == "to_onnx"], task)
        failing = sorted((r for r in rows if r["task"] == task and not r["success"]),
                         key=lambda r: (r["architecture"], r["exporter"]))
        if failing:
            lines += ["Errors:", ""]
            for r in failing:
                lines += [f".. _{_label(r)}:", "", f"**{r['architecture'].split('/', 1)[1]}**, {r['exporter']}, "
                          f"step *{r['step']}*: {error_text(r['error'])}", ""]
        if task in folders:
            lines += _folder_lines(folders[task], folder or {})
        not_run = sorted(k.split("/", 1)[1] for k in meta.get("discovered", {})
                         if k.startswith(task + "/") and k not in names)
        if not_run:
            lines += [f"Not run yet ({len(not_run)}): " + ", ".join(f"``{n}``" for n in not_run) + ".", ""]
    for task in sorted(set(folders) - {t["task"] for t in summary}):  # the text tasks: folders only
        lines += [f".. _lib-tasks-{task}:", "", task, "-" * len(task), ""]
        lines += _folder_lines(folders[task], folder or {})
    lines += _stale_lines(rows, lambda r: r["architecture"])
    return "\n".join(lines)


def write_library_pages(rows_by_library: dict[str, tuple[list, dict]], out_dir: str | Path,
                        folder: dict[str, Any] | None = None) -> list[str]:
    """Writes ``<library>.rst`` for every library with rows (``folder``: the folder sweep's rows, on the tasks
    page); returns the page names written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for library, (rows, meta) in rows_by_library.items():
        if not rows:
            continue
        path = out / f"{library}.rst"
        text = tasks_page(rows, meta, folder) if library == "tasks" else library_page(library, rows, meta)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(library)
    return written
