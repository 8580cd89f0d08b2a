// Greedy generation with transformers.js in headless Chromium (onnxruntime-web, WASM) on an encoder-decoder folder
// written by `python -m fx2onnx export` (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx): a page served on
// 127.0.0.1 loads the folder as a browser user would, offline.
//   node transformersjs_browser_seq2seq.mjs FOLDER INPUTS.json [FOLDER INPUTS.json ...] [NEW_TOKENS] [CHROMIUM]
// INPUTS.json as tests/clients/transformersjs_seq2seq.mjs reads it (input_ids + attention_mask, input_features,
// input_values or pixel_values; pixel_values with input_ids: an image-text folder, onnx/embed_tokens.onnx +
// onnx/vision_encoder.onnx + onnx/decoder_model_merged.onnx, every input of the processor fed: Qwen-VL's
// image_grid_thw, Idefics 3's boolean pixel_attention_mask). Several folders run one after the other in one page (one
// browser). Prints one JSON line per folder: {"sequences": [[...]], "seconds": ...}.
import fs from "node:fs";
import { printResult, runInChromium } from "./chromium_page.mjs";

const args = process.argv.slice(2);
const runs = [];
while (args.length >= 2 && args[1].endsWith(".json")) runs.push(args.splice(0, 2));
const [newTokens = "8", chromium = "/usr/bin/chromium"] = args;
if (!runs.length) {
  console.error("usage: node transformersjs_browser_seq2seq.mjs FOLDER INPUTS.json [FOLDER INPUTS.json ...] " +
                "[NEW_TOKENS] [CHROMIUM]");
  process.exit(2);
}
const inputs = runs.map(([, file]) => fs.readFileSync(file, "utf8"));
const names = runs.length === 1 ? ["model"] : runs.map((_, i) => `model${i}`);
const body = `
  function tensor(type, nested) {
    const dims = [];
    for (let level = nested; Array.isArray(level); level = level[0]) dims.push(level.length);
    const flat = nested.flat(Infinity);
    const data = type === "int64" ? BigInt64Array.from(flat.map(BigInt))
      : type === "bool" ? Uint8Array.from(flat.map(Number)) : Float32Array.from(flat);
    return new Tensor(type, data, dims);
  }
  const types = { pixel_values: "float32", pixel_attention_mask: "bool" };  // the others in int64
  const runs = [];
  for (const [name, inputs] of [${names.map((name, i) => `[${JSON.stringify(name)}, ${inputs[i]}]`).join(", ")}]) {
    const audio = ["input_features", "input_values"].find((k) => k in inputs);
    const image = "pixel_values" in inputs;
    const text = "input_ids" in inputs;  // with pixel_values: an image-text model (LLaVA's split)
    const auto = audio ? AutoModelForSpeechSeq2Seq : image && text ? AutoModelForImageTextToText
               : image ? AutoModelForVision2Seq : AutoModelForSeq2SeqLM;
    const model = await auto.from_pretrained(name, { dtype: "fp32", device: "wasm" });
    const feeds = audio ? { [audio]: tensor("float32", inputs[audio]) }
                : image && !text ? { pixel_values: tensor("float32", inputs.pixel_values) }
                : Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, tensor(types[k] ?? "int64", v)]));
    const begin = performance.now();
    const output = await model.generate({ ...feeds, max_new_tokens: ${+newTokens}, do_sample: false });
    const seconds = (performance.now() - begin) / 1000;
    runs.push({ sequences: output.tolist().map((row) => row.map(Number)), seconds });
    await model.dispose();
  }
  window.result = { runs };
`;
const result = await runInChromium(runs.length === 1 ? runs[0][0] : runs.map(([folder]) => folder),
                                   ["AutoModelForImageTextToText", "AutoModelForSeq2SeqLM",
                                    "AutoModelForSpeechSeq2Seq", "AutoModelForVision2Seq", "Tensor"],
                                   body, chromium);
if (result.error) printResult(result);
for (const run of result.runs) printResult(run);
