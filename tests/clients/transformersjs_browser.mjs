// Greedy generation with transformers.js in headless Chromium (onnxruntime-web, WASM) on a folder written by
// `python -m fx2onnx export`: a page served on 127.0.0.1 loads the folder as a browser user would, offline.
//   node transformersjs_browser.mjs FOLDER '[token ids]' [NEW_TOKENS] [CHROMIUM]
// Prints one JSON line: {"new_ids": [...], "seconds": ...}. CHROMIUM defaults to Debian's /usr/bin/chromium.
import { printResult, runInChromium } from "./chromium_page.mjs";

const [folder, idsJson, newTokens = "8", chromium = "/usr/bin/chromium"] = process.argv.slice(2);
if (!folder || !idsJson) {
  console.error("usage: node transformersjs_browser.mjs FOLDER '[token ids]' [NEW_TOKENS] [CHROMIUM]");
  process.exit(2);
}
const body = `
  const ids = ${JSON.stringify(JSON.parse(idsJson))};
  const model = await AutoModelForCausalLM.from_pretrained("model", { dtype: "fp32", device: "wasm" });
  const input_ids = new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
  const attention_mask = new Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
  const begin = performance.now();
  const output = await model.generate({ input_ids, attention_mask, max_new_tokens: ${+newTokens},
                                        min_new_tokens: ${+newTokens}, do_sample: false });
  const seconds = (performance.now() - begin) / 1000;
  window.result = { new_ids: Array.from(output.data, Number).slice(ids.length), seconds };`;
printResult(await runInChromium(folder, ["AutoModelForCausalLM", "Tensor"], body, chromium));
