// A transformers.js pipeline (Node, onnxruntime-node) on a folder written by `python -m fx2onnx export`, offline.
//   node transformersjs_pipeline.mjs FOLDER TASK '[inputs]' '{options}'
// Prints one JSON line: the pipeline's output on each input.
import path from "node:path";
import { pipeline, env } from "@huggingface/transformers";

const [folder, task, inputsJson, optionsJson = "{}"] = process.argv.slice(2);
if (!folder || !task || !inputsJson) {
  console.error("usage: node transformersjs_pipeline.mjs FOLDER TASK '[inputs]' '{options}'");
  process.exit(2);
}
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(folder)) + path.sep;
const run = await pipeline(task, path.basename(path.resolve(folder)), { dtype: "fp32" });
const results = [];
for (const input of JSON.parse(inputsJson)) {
  results.push(await run(input, JSON.parse(optionsJson)));
}
console.log(JSON.stringify(results));
