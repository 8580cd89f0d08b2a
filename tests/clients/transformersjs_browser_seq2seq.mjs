// Greedy generation with transformers.js in headless Chromium (onnxruntime-web, WASM) on an encoder-decoder folder
// written by `python -m fx2onnx export` (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx): a page served on
// 127.0.0.1 loads the folder as a browser user would, offline.
//   node transformersjs_browser_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [CHROMIUM]
// INPUTS.json as tests/clients/transformersjs_seq2seq.mjs reads it (input_ids + attention_mask, input_features,
// input_values or pixel_values; pixel_values with input_ids: an image-text folder, onnx/embed_tokens.onnx +
// onnx/vision_encoder.onnx + onnx/decoder_model_merged.onnx). Prints one JSON line: {"sequences": [[...]], "seconds": ...}.
import fs from "node:fs";
import { printResult, runInChromium } from "./chromium_page.mjs";

const [folder, inputsFile, newTokens = "8", chromium = "/usr/bin/chromium"] = process.argv.slice(2);
if (!folder || !inputsFile) {
  console.error("usage: node transformersjs_browser_seq2seq.mjs FOLDER INPUTS.json [NEW_TOKENS] [CHROMIUM]");
  process.exit(2);
}
const inputs = fs.readFileSync(inputsFile, "utf8");
const body = `
  function tensor(type, nested) {
    const dims = [];
    for (let level = nested; Array.isArray(level); level = level[0]) dims.push(level.length);
    const flat = nested.flat(Infinity);
    const data = type === "int64" ? BigInt64Array.from(flat.map(BigInt)) : Float32Array.from(flat);
    return new Tensor(type, data, dims);
  }
  const inputs = ${inputs};
  const audio = ["input_features", "input_values"].find((k) => k in inputs);
  const image = "pixel_values" in inputs;
  const text = "input_ids" in inputs;  // with pixel_values: an image-text model (LLaVA's split)
  const auto = audio ? AutoModelForSpeechSeq2Seq : image && text ? AutoModelForImageTextToText
             : image ? AutoModelForVision2Seq : AutoModelForSeq2SeqLM;
  const model = await auto.from_pretrained("model", { dtype: "fp32", device: "wasm" });
  const ids = text ? { input_ids: tensor("int64", inputs.input_ids),
                       attention_mask: tensor("int64", inputs.attention_mask) } : {};
  if ("image_grid_thw" in inputs) ids.image_grid_thw = tensor("int64", inputs.image_grid_thw);  // Qwen2.5-VL
  const feeds = audio ? { [audio]: tensor("float32", inputs[audio]) }
              : image ? { pixel_values: tensor("float32", inputs.pixel_values), ...ids } : ids;
  const begin = performance.now();
  const output = await model.generate({ ...feeds, max_new_tokens: ${+newTokens}, do_sample: false });
  const seconds = (performance.now() - begin) / 1000;
  window.result = { sequences: output.tolist().map((row) => row.map(Number)), seconds };
`;
printResult(await runInChromium(folder, ["AutoModelForImageTextToText", "AutoModelForSeq2SeqLM",
                                         "AutoModelForSpeechSeq2Seq", "AutoModelForVision2Seq", "Tensor"],
                                body, chromium));
