// A transformers.js pipeline (Node, onnxruntime-node) on a folder written by `python -m fx2onnx export`, offline.
//   node transformersjs_pipeline.mjs FOLDER TASK '[inputs]' '{options}'
// Prints one JSON line: the pipeline's output on each input.
import { pipeline } from "@huggingface/transformers";
import { offline } from "./node_offline.mjs";

const [folder, task, inputsJson, optionsJson = "{}"] = process.argv.slice(2);
if (!folder || !task || !inputsJson) {
  console.error("usage: node transformersjs_pipeline.mjs FOLDER TASK '[inputs]' '{options}'");
  process.exit(2);
}
const run = await pipeline(task, offline(folder), { dtype: "fp32" });
const results = [];
for (const input of JSON.parse(inputsJson)) {
  results.push(await run(input, JSON.parse(optionsJson)));
}
console.log(JSON.stringify(results));
