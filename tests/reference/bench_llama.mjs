// llama.cpp's speed on one GGUF file, for tests/bench_model.c to print beside kiln's as a
// ratio in the same run: the pinned node-llama-cpp (3.21.1, CPU only, prebuilt binaries).
//   node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS [BATCHES [STEPS_B [CTX]]]
// prints "llama.cpp prompt P tok/s decode D tok/s cpu PC ms DC ms/step" (prompt: one batch
// of PROMPT_TOKENS token ids; decode: batch 1, greedy, one token per evaluation, best of
// three runs of DECODE_STEPS, as bench_model times kiln; PC and DC the process CPU time of
// the prompt and of a decode step, which a machine shared with other work disturbs less),
// then for each B of the comma-separated BATCHES (e.g. "8,16") one line
// "llama.cpp batch B decode D tok/s cpu DC ms/step": B sequences of one context, each
// first given the 16-token prompt bench_model gives kiln's slot, then STEPS_B steps (best of
// three) in which every sequence evaluates one token at once; node-llama-cpp's batching
// gathers the B pending evaluations into one llama_decode of B tokens, so this is
// llama.cpp's own batched decode of B sequences. Every decoding sequence, batch 1's too,
// first holds the CTX tokens (default 16; bench_model's KILN_BENCH_CTX) bench_model gives
// kiln's: batch 1 decodes in a context of its own, not after the prompt, so both sides'
// attention covers the same positions.
// node-llama-cpp is found in the
// node_modules beside this script, or in the directory env KILN_LLAMA_MODULES names.
// The package's prebuilt llama.cpp ships one ggml CPU backend per x86 level
// (libggml-cpu-haswell.so, -alderlake, -skylakex, -icelake, -sapphirerapids, ...), and ggml
// loads the one that scores best on this CPU from the addon's directory. With env
// KILN_LLAMA_CPU=VARIANT (or KILN_KERNELS=avx2 / avxvnni, which pick haswell / alderlake: the
// same instruction sets as kiln's path) the script builds a node_modules in a temp directory
// with node-llama-cpp and its platform package hard-linked file by file (the other packages
// as symlinks), leaving out every other libggml-cpu-*.so, so that variant is the only one
// ggml can load. It prints "llama.cpp cpu backend NAME" (the .so ggml loaded) before its figures.
import fs from "node:fs";
import {createRequire} from "node:module";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modelPath, plenArg, stepsArg, threadsArg, batchesArg, stepsBArg, ctxArg] =
    process.argv.slice(2);
if (!modelPath) {
    console.error("usage: node bench_llama.mjs MODEL.gguf PROMPT_TOKENS DECODE_STEPS THREADS " +
                  "[BATCHES [STEPS_B [CTX]]]");
    process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
let base = process.env.KILN_LLAMA_MODULES ?? here;
const variantFor = {avx2: "haswell", avxvnni: "alderlake"};
const variant = process.env.KILN_LLAMA_CPU || variantFor[process.env.KILN_KERNELS ?? ""] || "";
let tmp = null;
if (variant) {
    const mods = fs.existsSync(path.join(base, "node_modules")) ? path.join(base, "node_modules")
                                                                 : base;
    const plat = `${process.platform}-${process.arch}`;
    const so = `libggml-cpu-${variant}.so`;
    const link = (from, to) => {
        if (fs.lstatSync(from).isDirectory()) {
            fs.mkdirSync(to);
            for (const e of fs.readdirSync(from))
                if (!/^libggml-cpu-.*\.so$/.test(e) || e === so)
                    link(path.join(from, e), path.join(to, e));
        } else {
            try {
                fs.linkSync(from, to);
            } catch {
                fs.copyFileSync(from, to);
            }
        }
    };
    if (!fs.existsSync(path.join(mods, "@node-llama-cpp", plat, "bins", plat, so))) {
        console.error(`no ${so} in ${mods}/@node-llama-cpp/${plat}`);
        process.exit(1);
    }
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-llama-"));
    process.on("exit", () => fs.rmSync(tmp, {recursive: true, force: true}));
    for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"])
        process.on(sig, () => process.exit(1));
    const out = path.join(tmp, "node_modules");
    fs.mkdirSync(path.join(out, "@node-llama-cpp"), {recursive: true});
    for (const e of fs.readdirSync(mods))
        if (e !== "node-llama-cpp" && e !== "@node-llama-cpp" && !e.startsWith("."))
            fs.symlinkSync(path.join(mods, e), path.join(out, e));
    link(path.join(mods, "node-llama-cpp"), path.join(out, "node-llama-cpp"));
    link(path.join(mods, "@node-llama-cpp", plat), path.join(out, "@node-llama-cpp", plat));
    base = tmp;
}
const req = createRequire(path.join(base, "package.json"));
const {getLlama} = await import(pathToFileURL(req.resolve("node-llama-cpp")).href);

const plen = Number(plenArg ?? 128), steps = Number(stepsArg ?? 8), threads = Number(threadsArg ?? 2);
const batches = (batchesArg ?? "").split(",").map(Number).filter(b => b > 1);
const stepsB = Number(stepsBArg ?? 4), dctx = Math.max(16, Number(ctxArg ?? 16));
// ggml says which CPU backend it loaded at "log" level; errors still go to stderr
let backend = "";
const logger = (level, msg) => {
    const m = /loaded CPU backend from .*\/(libggml-cpu-[^/]*\.so)/.exec(msg);
    if (m)
        backend = m[1];
    else if (level === "error" || level === "fatal")
        console.error(msg.trimEnd());
};
const llama = await getLlama({gpu: false, build: "never", logLevel: "log", logger});
const model = await llama.loadModel({modelPath, defaultContextFlashAttention: false});
// the addon's log lines reach the logger asynchronously: by now the backend's has
console.log(`llama.cpp cpu backend ${backend || "unknown"}`);
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
// decode from the CTX tokens bench_model gives kiln's slot 0, in a context of its own
const dctxObj = await model.createContext({contextSize: dctx + 2 + 3 * steps, batchSize: 512,
                                           sequences: 1, threads, flashAttention: false});
const dseq = dctxObj.getSequence();
{
    const p = fill(dctx, 10);
    r = await dseq.controlledEvaluate(p.map((t, i) => (i === dctx - 1 ? [t, next] : t)));
    tok = r[dctx - 1].next.token;
}
r = await dseq.controlledEvaluate([[tok, next]]); // warm
tok = r[0].next.token;
let best = Infinity, bestCpu = 0;
for (let rep = 0; rep < 3; rep++) {
    t0 = performance.now();
    c0 = cpuMs();
    for (let s = 0; s < steps; s++) {
        r = await dseq.controlledEvaluate([[tok, next]]);
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
await dctxObj.dispose();

for (const b of batches) {
    // contextSize is per sequence; the prompt, a warm step and 3 * stepsB steps fit
    const bctx = await model.createContext({contextSize: Math.max(256, dctx + 2 + 3 * stepsB),
                                            batchSize: 512, sequences: b,
                                            threads, flashAttention: false});
    const seqs = [];
    for (let s = 0; s < b; s++)
        seqs.push(bctx.getSequence());
    const step = async toks => (await Promise.all(seqs.map((q, s) =>
        q.controlledEvaluate([[toks[s], next]])))).map(x => x[0].next.token);
    let toks = (await Promise.all(seqs.map((q, s) => {
        const p = fill(dctx, 10 + s);
        return q.controlledEvaluate(p.map((t, i) => (i === dctx - 1 ? [t, next] : t)));
    }))).map(x => x[dctx - 1].next.token);
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
