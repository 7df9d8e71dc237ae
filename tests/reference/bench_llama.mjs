// llama.cpp's speed on one GGUF file, for tests/bench_model.c to print beside kiln's as a
// ratio in the same run: the pinned node-llama-cpp (3.21.1, CPU only, prebuilt binaries).
//   node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS
// prints "llama.cpp prompt P tok/s decode D tok/s cpu PC ms DC ms/step" (prompt: one batch
// of PROMPT_TOKENS token ids; decode: batch 1, greedy, one token per evaluation, best of
// three runs of DECODE_STEPS, as bench_model times kiln; PC and DC the process CPU time of
// the prompt and of a decode step, which a machine shared with other work disturbs less). node-llama-cpp is found in the node_modules
// beside this script, or in the directory env KILN_LLAMA_MODULES names.
import {createRequire} from "node:module";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modelPath, plenArg, stepsArg, threadsArg] = process.argv.slice(2);
if (!modelPath) {
    console.error("usage: node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS");
    process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const base = process.env.KILN_LLAMA_MODULES ?? here;
const req = createRequire(path.join(base, "package.json"));
const {getLlama} = await import(pathToFileURL(req.resolve("node-llama-cpp")).href);

const plen = Number(plenArg ?? 128), steps = Number(stepsArg ?? 8), threads = Number(threadsArg ?? 2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, defaultContextFlashAttention: false});
const ctx = await model.createContext({contextSize: 1024, batchSize: 512, sequences: 1, threads,
                                       flashAttention: false});
const seq = ctx.getSequence();
const nv = model.tokens.vocabularySize ?? 512;
// the same prompt ids bench_model gives kiln (fill_prompt with salt 0)
const ids = [];
for (let i = 0; i < plen; i++)
    ids.push(300 + ((i * 7919) % (nv - 300)));
const next = {generateNext: {token: true}};

const cpuMs = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
};
let t0 = performance.now(), c0 = cpuMs();
let r = await seq.controlledEvaluate(ids.map((t, i) => (i === ids.length - 1 ? [t, next] : t)));
const promptTps = plen / ((performance.now() - t0) / 1000), promptCpu = cpuMs() - c0;
let tok = r[ids.length - 1].next.token;
r = await seq.controlledEvaluate([[tok, next]]); // warm
tok = r[0].next.token;
let best = Infinity, bestCpu = 0;
for (let rep = 0; rep < 3; rep++) {
    t0 = performance.now();
    c0 = cpuMs();
    for (let s = 0; s < steps; s++) {
        r = await seq.controlledEvaluate([[tok, next]]);
        tok = r[0].next.token;
    }
    if (performance.now() - t0 < best) {
        best = performance.now() - t0;
        bestCpu = cpuMs() - c0;
    }
}
console.log(`llama.cpp prompt ${promptTps.toFixed(1)} tok/s decode ${(steps / (best / 1000)).toFixed(1)} ` +
            `tok/s cpu ${promptCpu.toFixed(1)} ms ${(bestCpu / steps).toFixed(2)} ms/step`);
process.exit(0);
