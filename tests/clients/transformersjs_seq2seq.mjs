// Greedy generation with transformers.js (@huggingface/transformers on onnxruntime-node) on an encoder-decoder folder
// written by `python -m fx2onnx export` (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx), offline:
//   node transformersjs_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [DTYPE] [THREADS]
// INPUTS.json holds {"input_ids": [[...]], "attention_mask": [[...]]} (a text model: T5, BART, Marian) or
// {"input_features": nested arrays (batch, mel, frames)} (Whisper), {"input_values": (batch, samples)} (Moonshine) or
// {"pixel_values": (batch, channels, height, width)} (TrOCR, Donut: a vision encoder-decoder). Prints one JSON line: {"new_ids": [[...]],
// "seconds"} (new_ids: the tokens after the decoder's prompt; seconds: the whole generate call).
import fs from "node:fs";
import { AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq, AutoModelForVision2Seq } from "@huggingface/transformers";
import { offline, tensor } from "./node_offline.mjs";

const [folder, inputsFile, newTokens = "8", dtype = "fp32", threads = "0"] = process.argv.slice(2);
if (!folder || !inputsFile) {
  console.error("usage: node transformersjs_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [DTYPE] [THREADS]");
  process.exit(2);
}
const name = offline(folder);
const options = { local_files_only: true, dtype, device: "cpu" };
if (+threads > 0) options.session_options = { intraOpNumThreads: +threads, interOpNumThreads: 1 };

const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf8"));
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
