// Greedy generation with transformers.js (@huggingface/transformers on onnxruntime-node) on an image-text folder
// written by `python -m fx2onnx export` (onnx/embed_tokens.onnx + onnx/vision_encoder.onnx +
// onnx/decoder_model_merged.onnx, the split transformers.js loads for LLaVA and Qwen2.5-VL), offline:
//   node transformersjs_image_text.mjs FOLDER INPUTS.json [NEW_TOKENS]
// INPUTS.json holds the processor's outputs: {"input_ids": [[...]], "attention_mask": [[...]], "pixel_values":
// (images, channels, height, width)} (Qwen2.5-VL: the patches and "image_grid_thw"). Prints one JSON line: {"sequences": [[...]], "seconds"} (the prompt, then the
// new tokens; seconds: the whole generate call).
import fs from "node:fs";
import path from "node:path";
import { AutoModelForImageTextToText, Tensor, env } from "@huggingface/transformers";

const [folder, inputsFile, newTokens = "8"] = process.argv.slice(2);
if (!folder || !inputsFile) {
  console.error("usage: node transformersjs_image_text.mjs FOLDER INPUTS.json [NEW_TOKENS]");
  process.exit(2);
}
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(folder));
env.useFSCache = false;
env.useBrowserCache = false;

const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf8"));
function tensor(type, nested) {
  const dims = [];
  for (let level = nested; Array.isArray(level); level = level[0]) dims.push(level.length);
  const flat = nested.flat(Infinity);
  const data = type === "int64" ? BigInt64Array.from(flat.map(BigInt)) : Float32Array.from(flat);
  return new Tensor(type, data, dims);
}
const model = await AutoModelForImageTextToText.from_pretrained(path.basename(path.resolve(folder)),
                                                                 { local_files_only: true, dtype: "fp32", device: "cpu" });
// pixel_values in float32, the others (ids, mask, Qwen2.5-VL's image_grid_thw) in int64
const feeds = Object.fromEntries(Object.entries(inputs).map(
  ([name, value]) => [name, tensor(name === "pixel_values" ? "float32" : "int64", value)]));
const begin = performance.now();
const output = await model.generate({ ...feeds, max_new_tokens: +newTokens, do_sample: false });
const seconds = (performance.now() - begin) / 1000;
console.log(JSON.stringify({ sequences: output.tolist().map((row) => row.map(Number)), seconds }));
await model.dispose();
