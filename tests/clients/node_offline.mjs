// transformers.js in Node (onnxruntime-node) on one folder written by `python -m fx2onnx export`, offline: the set-up
// the Node client scripts of this folder share.
import path from "node:path";
import { Tensor, env } from "@huggingface/transformers";

// Points transformers.js at the folder's parent, no download and no cache; returns the folder's model name.
export function offline(folder) {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = path.dirname(path.resolve(folder)) + path.sep;
  env.useFSCache = false;
  env.useBrowserCache = false;
  return path.basename(path.resolve(folder));
}

// A Tensor of `type` ("int64", "bool", else float32) from nested arrays as JSON holds them.
export function tensor(type, nested) {
  const dims = [];
  for (let level = nested; Array.isArray(level); level = level[0]) dims.push(level.length);
  const flat = nested.flat(Infinity);
  const data = type === "int64" ? BigInt64Array.from(flat.map(BigInt))
    : type === "bool" ? Uint8Array.from(flat.map(Number)) : Float32Array.from(flat);
  return new Tensor(type, data, dims);
}
