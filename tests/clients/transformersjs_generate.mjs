// Greedy generation with transformers.js (@huggingface/transformers on onnxruntime-node) on a folder written by
// `python -m fx2onnx export`, offline, as a user of transformers.js loads one:
//   node transformersjs_generate.mjs FOLDER PROMPT [NEW_TOKENS] [THREADS] [DTYPE]
// DTYPE: the file transformers.js selects (fp32: onnx/model.onnx, q4: onnx/model_q4.onnx...; default: the dtype
// config.json's transformers.js_config names, else transformers.js' default).
// PROMPT is a text (encoded by the folder's tokenizer in transformers.js) or token ids as JSON ('[5, 60, 7]').
// Prints one JSON line: {"prompt_ids", "new_ids", "text", "seconds"} (seconds: the whole generate call).
import { AutoModelForCausalLM, AutoTokenizer, Tensor } from "@huggingface/transformers";
import { offline } from "./node_offline.mjs";

const [folder, prompt, newTokens = "8", threads = "0", dtype = ""] = process.argv.slice(2);
if (!folder || prompt === undefined) {
  console.error("usage: node transformersjs_generate.mjs FOLDER PROMPT|'[ids]' [NEW_TOKENS] [THREADS]");
  process.exit(2);
}
const name = offline(folder);  // the folder only: no download, no cache

const options = { local_files_only: true, device: "cpu" };
if (dtype) options.dtype = dtype;
if (+threads > 0) options.session_options = { intraOpNumThreads: +threads, interOpNumThreads: 1 };
const model = await AutoModelForCausalLM.from_pretrained(name, options);
let tokenizer = null;
let ids;
if (prompt.startsWith("[")) {
  ids = JSON.parse(prompt);
} else {
  tokenizer = await AutoTokenizer.from_pretrained(name, { local_files_only: true });
  ids = tokenizer.encode(prompt);
}
const input_ids = new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
const attention_mask = new Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
const max_new_tokens = +newTokens;
const begin = performance.now();
const output = await model.generate({ input_ids, attention_mask, max_new_tokens, min_new_tokens: max_new_tokens,
                                      do_sample: false });
const seconds = (performance.now() - begin) / 1000;
const new_ids = Array.from(output.data, Number).slice(ids.length);
const text = tokenizer ? tokenizer.decode(new_ids, { skip_special_tokens: true }) : null;
console.log(JSON.stringify({ prompt_ids: ids, new_ids, text, seconds }));
await model.dispose();
