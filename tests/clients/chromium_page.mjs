// Runs a transformers.js script in headless Chromium (onnxruntime-web, WASM) as a browser user would, offline: a page
// served on 127.0.0.1 holds transformers.js' web build, onnxruntime-web's WASM files and the exported folder (as the
// model "model" under /models/; several folders as "model0", "model1", ...). The scripts of this folder give it the
// body of their page and print its result: one browser for several folders.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "node_modules");
const types = { ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json",
                ".wasm": "application/wasm", ".html": "text/html" };

// `folder`: one folder (the model "model") or an array of them ("model0", "model1", ...); `imports`: the names imported
// from transformers.js; `body`: the page's code after transformers.js is set up offline, setting `window.result` (an
// object; an exception becomes `{error}`). Resolves to the result.
export async function runInChromium(folder, imports, body, chromium = "/usr/bin/chromium") {
  const models = Array.isArray(folder) ? folder.map((f, i) => [`/models/model${i}/`, path.resolve(f)])
                                       : [["/models/model/", path.resolve(folder)]];
  const routes = {  // URL prefix -> folder served
    "/transformers/": path.join(root, "@huggingface", "transformers", "dist"),
    "/ort/": path.join(root, "onnxruntime-web", "dist"),
    ...Object.fromEntries(models),
  };
  const page = `<!doctype html><html><body><script type="module">
import { ${[...imports, "env"].join(", ")} } from "/transformers/transformers.js";
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = "/models/";
env.useBrowserCache = false;
env.backends.onnx.wasm.wasmPaths = { mjs: "/ort/ort-wasm-simd-threaded.asyncify.mjs",
                                     wasm: "/ort/ort-wasm-simd-threaded.asyncify.wasm" };
env.backends.onnx.wasm.numThreads = 1;
try {
${body}
} catch (e) {
  window.result = { error: String(e && e.stack || e) };
}
</script></body></html>`;
  const server = http.createServer((request, response) => {
    const url = decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname);
    if (url === "/") {
      response.writeHead(200, { "Content-Type": "text/html" });
      return response.end(page);
    }
    for (const [prefix, dir] of Object.entries(routes)) {
      if (!url.startsWith(prefix)) continue;
      const file = path.join(dir, url.slice(prefix.length));
      if (!file.startsWith(dir) || !fs.existsSync(file) || !fs.statSync(file).isFile()) break;
      response.writeHead(200, { "Content-Type": types[path.extname(file)] ?? "application/octet-stream" });
      return fs.createReadStream(file).pipe(response);
    }
    response.writeHead(404);
    response.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
                                           args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://127.0.0.1:${server.address().port}/`);
    await tab.waitForFunction(() => window.result !== undefined, { timeout: 240000, polling: 200 });
    return await tab.evaluate(() => window.result);
  } finally {
    await browser.close();
    server.close();
  }
}

// Prints the result as one JSON line, or its error on stderr (exit code 1).
export function printResult(result) {
  if (result.error) {
    console.error(result.error);
    process.exit(1);
  }
  console.log(JSON.stringify(result));
}
