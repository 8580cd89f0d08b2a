// The speed of a folder in transformers.js (@huggingface/transformers on onnxruntime-node), greedy, offline:
//   node bench/transformersjs_speed.mjs FOLDER DTYPE THREADS PROMPT_IDS_JSON NEW_TOKENS ROUNDS
// One warm-up, then ROUNDS rounds of generate(1 new token) and generate(NEW_TOKENS): prints one JSON line
// {"first_token_s": [...], "total_s": [...], "new_ids": [...]} (the times of every round).
import path from "node:path";
import { AutoModelForCausalLM, Tensor, env } from "@huggingface/transformers";

const [folder, dtype, threads, idsJson, newTokens, rounds] = process.argv.slice(2);
Object.assign(env, { allowRemoteModels: false, allowLocalModels: true, useFSCache: false,
                     localModelPath: path.dirname(path.resolve(folder)) });
const model = await AutoModelForCausalLM.from_pretrained(path.basename(path.resolve(folder)), {
  local_files_only: true, device: "cpu", dtype,
  session_options: { intraOpNumThreads: +threads, interOpNumThreads: 1 } });
const ids = JSON.parse(idsJson);
const input_ids = new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
const attention_mask = new Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
async function run(n) {
  const begin = performance.now();
  const out = await model.generate({ input_ids, attention_mask, max_new_tokens: n, min_new_tokens: n,
                                     do_sample: false });
  return [(performance.now() - begin) / 1000, Array.from(out.data, Number).slice(ids.length)];
}
await run(2);  // warm-up
const first = [], total = [];
let newIds = [];
for (let r = 0; r < +rounds; ++r) {
  first.push((await run(1))[0]);
  const [seconds, tokens] = await run(+newTokens);
  total.push(seconds);
  newIds = tokens;
}
console.log(JSON.stringify({ first_token_s: first, total_s: total, new_ids: newIds }));
await model.dispose();
