// Greedy generation with transformers.js (@huggingface/transformers on onnxruntime-node) on an encoder-decoder folder
// written by `python -m fx2onnx export` (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx), offline:
//   node transformersjs_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [DTYPE] [THREADS]
// INPUTS.json holds {"input_ids": [[...]], "attention_mask": [[...]]} (a text model: T5, BART, Marian) or
// {"input_features": nested arrays (batch, mel, frames)} (Whisper), {"input_values": (batch, samples)} (Moonshine) or
// {"pixel_values": (batch, channels, height, width)} (TrOCR, Donut: a vision encoder-decoder). Prints one JSON line: {"new_ids": [[...]],
// "seconds"} (new_ids: the tokens after the decoder's prompt; seconds: the whole generate call).
import fs from "node:fs";
import path from "node:path";
import { AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq, AutoModelForVision2Seq, Tensor, env } from "@huggingface/transformers";

const [folder, inputsFile, newTokens = "8", dtype = "fp32", threads = "0"] = process.argv.slice(2);
if (!folder || !inputsFile) {
  console.error("usage: node transformersjs_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [DTYPE] [THREADS]");
  process.exit(2);
}
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(folder));
env.useFSCache = false;
env.useBrowserCache = false;
const name = path.basename(path.resolve(folder));
const options = { local_files_only: true, dtype, device: "cpu" };
if (+threads > 0) options.session_options = { intraOpNumThreads: +threads, interOpNumThreads: 1 };

const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf8"));
function tensor(type, nested) {
  const dims = [];
  for (let level = nested; Array.isArray(level); level = level[0]) dims.push(level.length);
  const flat = nested.flat(Infinity);
  const data = type === "int64" ? BigInt64Array.from(flat.map(BigInt)) : Float32Array.from(flat);
  return new Tensor(type, data, dims);
}
const audio = ["input_features", "input_values"].find((k) => k in inputs);
const image = "pixel_values" in inputs;
const auto = audio ? AutoModelForSpeechSeq2Seq : image ? AutoModelForVision2Seq : AutoModelForSeq2SeqLM;
const model = await auto.from_pretrained(name, options);
const feeds = audio ? { [audio]: tensor("float32", inputs[audio]) }
            : image ? { pixel_values: tensor("float32", inputs.pixel_values) }
            : { input_ids: tensor("int64", inputs.input_ids), attention_mask: tensor("int64", inputs.attention_mask) };
const max_new_tokens = +newTokens;
const begin = performance.now();
const output = await model.generate({ ...feeds, max_new_tokens, do_sample: false });
const seconds = (performance.now() - begin) / 1000;
console.log(JSON.stringify({ sequences: output.tolist().map((row) => row.map(Number)), seconds }));
await model.dispose();
