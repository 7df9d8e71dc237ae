// llama.cpp's speed on one GGUF file, for tests/bench_model.c to print beside kiln's as a
// ratio in the same run: the pinned node-llama-cpp (3.21.1, CPU only, prebuilt binaries).
//   node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS [BATCHES [STEPS_B]]
// prints "llama.cpp prompt P tok/s decode D tok/s cpu PC ms DC ms/step" (prompt: one batch
// of PROMPT_TOKENS token ids; decode: batch 1, greedy, one token per evaluation, best of
// three runs of DECODE_STEPS, as bench_model times kiln; PC and DC the process CPU time of
// the prompt and of a decode step, which a machine shared with other work disturbs less),
// then for each B of the comma-separated BATCHES (e.g. "8,16") one line
// "llama.cpp batch B decode D tok/s cpu DC ms/step": B sequences of one context, each
// first given the 16-token prompt bench_model gives kiln's slot, then STEPS_B steps (best of
// three) in which every sequence evaluates one token at once; node-llama-cpp's batching
// gathers the B pending evaluations into one llama_decode of B tokens, so this is
// llama.cpp's own batched decode of B sequences. node-llama-cpp is found in the
// node_modules beside this script, or in the directory env KILN_LLAMA_MODULES names.
import {createRequire} from "node:module";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modelPath, plenArg, stepsArg, threadsArg, batchesArg, stepsBArg] = process.argv.slice(2);
if (!modelPath) {
    console.error("usage: node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS " +
                  "[BATCHES [STEPS_B]]");
    process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const base = process.env.KILN_LLAMA_MODULES ?? here;
const req = createRequire(path.join(base, "package.json"));
const {getLlama} = await import(pathToFileURL(req.resolve("node-llama-cpp")).href);

const plen = Number(plenArg ?? 128), steps = Number(stepsArg ?? 8), threads = Number(threadsArg ?? 2);
const batches = (batchesArg ?? "").split(",").map(Number).filter(b => b > 1);
const stepsB = Number(stepsBArg ?? 4);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, defaultContextFlashAttention: false});
const ctx = await model.createContext({contextSize: 1024, batchSize: 512, sequences: 1, threads,
                                       flashAttention: false});
const seq = ctx.getSequence();
const nv = model.tokens.vocabularySize ?? 512;
// the prompt ids bench_model gives kiln (its fill_prompt)
const fill = (n, salt) => {
    const ids = [];
    for (let i = 0; i < n; i++)
        ids.push(300 + ((i * 7919 + salt * 104729) % (nv - 300)));
    return ids;
};
const ids = fill(plen, 0);
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
await ctx.dispose();

for (const b of batches) {
    // contextSize is per sequence; 16 prompt tokens, a warm step and 3 * stepsB steps fit
    const bctx = await model.createContext({contextSize: 256, batchSize: 512, sequences: b,
                                            threads, flashAttention: false});
    const seqs = [];
    for (let s = 0; s < b; s++)
        seqs.push(bctx.getSequence());
    const step = async toks => (await Promise.all(seqs.map((q, s) =>
        q.controlledEvaluate([[toks[s], next]])))).map(x => x[0].next.token);
    let toks = (await Promise.all(seqs.map((q, s) => {
        const p = fill(16, 10 + s);
        return q.controlledEvaluate(p.map((t, i) => (i === 15 ? [t, next] : t)));
    }))).map(x => x[15].next.token);
    toks = await step(toks); // warm
    let bb = Infinity, bc = 0;
    for (let rep = 0; rep < 3; rep++) {
        t0 = performance.now();
        c0 = cpuMs();
        for (let s = 0; s < stepsB; s++)
            toks = await step(toks);
        if (performance.now() - t0 < bb) {
            bb = performance.now() - t0;
            bc = cpuMs() - c0;
        }
    }
    console.log(`llama.cpp batch ${b} decode ${(b * stepsB / (bb / 1000)).toFixed(1)} tok/s ` +
                `cpu ${(bc / stepsB).toFixed(2)} ms/step`);
    await bctx.dispose();
}
process.exit(0);
