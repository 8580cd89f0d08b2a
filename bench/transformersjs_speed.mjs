// The speed of a folder in transformers.js (@huggingface/transformers on onnxruntime-node), greedy, offline:
//   node bench/transformersjs_speed.mjs FOLDER DTYPE THREADS PROMPT_IDS_JSON NEW_TOKENS ROUNDS
// One warm-up, then ROUNDS rounds of generate(1 new token) and generate(NEW_TOKENS): prints one JSON line
// {"first_token_s": [...], "total_s": [...], "first_token_cpu_s": [...], "total_cpu_s": [...], "rss_mb": ...,
//  "new_ids": [...]}: the wall-clock and the process' CPU times of every round (at one intra-op thread the CPU time
// hardly moves with the load other processes put on the machine, the wall-clock time does) and the memory the process
// holds after them (not resourceUsage's maxRSS: on Linux a child started by a fork keeps its parent's peak).
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
  const begin = performance.now(), cpuBegin = process.cpuUsage();
  const out = await model.generate({ input_ids, attention_mask, max_new_tokens: n, min_new_tokens: n,
                                     do_sample: false });
  const cpu = process.cpuUsage(cpuBegin);
  return [(performance.now() - begin) / 1000, (cpu.user + cpu.system) / 1e6,
          Array.from(out.data, Number).slice(ids.length)];
}
await run(2);  // warm-up
const first = [], total = [], firstCpu = [], totalCpu = [];
let newIds = [];
for (let r = 0; r < +rounds; ++r) {
  const [firstSeconds, firstCpuSeconds] = await run(1);
  first.push(firstSeconds);
  firstCpu.push(firstCpuSeconds);
  const [seconds, cpuSeconds, tokens] = await run(+newTokens);
  total.push(seconds);
  totalCpu.push(cpuSeconds);
  newIds = tokens;
}
console.log(JSON.stringify({ first_token_s: first, total_s: total, first_token_cpu_s: firstCpu, total_cpu_s: totalCpu,
                             rss_mb: process.memoryUsage().rss / 2 ** 20, new_ids: newIds }));
await model.dispose();
