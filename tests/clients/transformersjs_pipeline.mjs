// transformers.js pipelines (Node, onnxruntime-node) on folders written by `python -m fx2onnx export`, offline, in one
// process (one start of Node and of onnxruntime for every folder of a test).
//   node transformersjs_pipeline.mjs JOBS.json
// JOBS.json: [{"folder": ..., "task": ..., "inputs": [...], "args": [...], "options": {...}}, ...] calls the pipeline
// on each input, then the arguments (the candidate labels of the zero-shot tasks), then the options; an input
// {"audio": [samples]} is given as a Float32Array (transformers.js reads no audio file in Node), {"texts": [...]} as
// an array of texts in one call, any other input as it is (a text, an image's path).
// Prints one JSON line: for each job, the pipeline's output on each input; tensors as {"dims", "data"}, images as
// {"width", "height", "channels", "data"}, audio as {"sampling_rate", "audio"}.
import fs from "node:fs";
import { pipeline, Tensor, RawImage } from "@huggingface/transformers";
import { offline } from "./node_offline.mjs";

const [jobsPath] = process.argv.slice(2);
if (!jobsPath) {
  console.error("usage: node transformersjs_pipeline.mjs JOBS.json");
  process.exit(2);
}

// The pipeline's output as JSON holds it.
function plain(value) {
  if (value instanceof Tensor) return { dims: value.dims, data: Array.from(value.data, Number) };
  if (value instanceof RawImage) {
    return { width: value.width, height: value.height, channels: value.channels, data: Array.from(value.data) };
  }
  if (ArrayBuffer.isView(value)) return Array.from(value, Number);
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, plain(item)]));
  }
  return value;
}

function input(given) {
  if (given && given.audio) return Float32Array.from(given.audio);
  if (given && given.texts) return given.texts;
  return given;
}

const jobs = JSON.parse(fs.readFileSync(jobsPath, "utf-8"));
// transformers.js remembers which files a model name has: two folders of one name would share the first one's
const names = new Map();
for (const { folder } of jobs) {
  const name = offline(folder);
  if (names.has(name) && names.get(name) !== folder) {
    console.error(`two folders named ${name}: ${names.get(name)} and ${folder}; give each folder its own name`);
    process.exit(2);
  }
  names.set(name, folder);
}
const results = [];
for (const job of jobs) {
  const run = await pipeline(job.task, offline(job.folder), { dtype: "fp32" });
  const outputs = [];
  for (const given of job.inputs) outputs.push(plain(await run(input(given), ...(job.args || []), job.options || {})));
  results.push(outputs);
  await run.dispose();
}
console.log(JSON.stringify(results));
