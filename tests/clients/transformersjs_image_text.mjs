// Greedy generation with transformers.js (@huggingface/transformers on onnxruntime-node) on an image-text folder
// written by `python -m fx2onnx export` (onnx/embed_tokens.onnx + onnx/vision_encoder.onnx +
// onnx/decoder_model_merged.onnx, the split transformers.js loads for LLaVA and Qwen2.5-VL), offline:
//   node transformersjs_image_text.mjs FOLDER INPUTS.json [NEW_TOKENS]
// INPUTS.json holds the processor's outputs: {"input_ids": [[...]], "attention_mask": [[...]], "pixel_values":
// (images, channels, height, width)} (Qwen2.5-VL: the patches and "image_grid_thw"). Prints one JSON line: {"sequences": [[...]], "seconds"} (the prompt, then the
// new tokens; seconds: the whole generate call).
import fs from "node:fs";
import { AutoModelForImageTextToText } from "@huggingface/transformers";
import { offline, tensor } from "./node_offline.mjs";

const [folder, inputsFile, newTokens = "8"] = process.argv.slice(2);
if (!folder || !inputsFile) {
  console.error("usage: node transformersjs_image_text.mjs FOLDER INPUTS.json [NEW_TOKENS]");
  process.exit(2);
}
const name = offline(folder);

const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf8"));
const model = await AutoModelForImageTextToText.from_pretrained(name, { local_files_only: true, dtype: "fp32", device: "cpu" });
// pixel_values in float32, Idefics 3's pixel_attention_mask in bool (as its processor in transformers.js makes it),
// the others (ids, mask, Qwen2.5-VL's image_grid_thw) in int64
const types = { pixel_values: "float32", pixel_attention_mask: "bool" };
const feeds = Object.fromEntries(Object.entries(inputs).map(
  ([name, value]) => [name, tensor(types[name] ?? "int64", value)]));
const begin = performance.now();
const output = await model.generate({ ...feeds, max_new_tokens: +newTokens, do_sample: false });
const seconds = (performance.now() - begin) / 1000;
console.log(JSON.stringify({ sequences: output.tolist().map((row) => row.map(Number)), seconds }));
await model.dispose();
