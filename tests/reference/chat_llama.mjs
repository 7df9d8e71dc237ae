// llama.cpp's time to first token over bench_cache's 10-turn chat, for tests/bench_cache.c to
// print beside kiln's: the pinned node-llama-cpp (3.21.1, CPU only, prebuilt binaries).
//   node chat_llama.mjs MODEL.gguf THREADS
// One context sequence keeps the conversation, as llama.cpp's server keeps a slot with
// cache_prompt: each turn the sequence keeps the longest common prefix of what it holds and
// the new prompt (the same ids bench_cache sends kiln: a 300-token system prompt, 100 user
// tokens a turn, the previous answers as fixed ids), erases the rest and evaluates the new
// tokens; the time to the first token is that evaluation, then 63 more tokens are
// generated one at a time. Prints "llama.cpp chat: TTFT per turn (ms): t1 ... t10; turn 10 /
// turn 1 = R". node-llama-cpp is found in the node_modules beside this script, or in the
// directory env KILN_LLAMA_MODULES names.
import {createRequire} from "node:module";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modelPath, threadsArg] = process.argv.slice(2);
if (!modelPath) {
    console.error("usage: node chat_llama.mjs MODEL.gguf THREADS");
    process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const base = process.env.KILN_LLAMA_MODULES ?? here;
const req = createRequire(path.join(base, "package.json"));
const {getLlama} = await import(pathToFileURL(req.resolve("node-llama-cpp")).href);

const threads = Number(threadsArg ?? 2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, defaultContextFlashAttention: false});
const ctx = await model.createContext({contextSize: 2048, batchSize: 512, sequences: 1, threads,
                                       flashAttention: false});
const seq = ctx.getSequence();
const nv = 50257; // gpt-2's vocabulary, as bench_cache.c's tok()
const tok = (seed, i) => 300 + ((seed * 104729 + i * 7919) % (nv - 300));
const next = {generateNext: {token: true}};

const ids = [];
for (let i = 0; i < 300; i++)
    ids.push(tok(1, i));
const ttft = [];
for (let turn = 0; turn < 10; turn++) {
    for (let i = 0; i < 100; i++)
        ids.push(tok(100 + turn, i));
    const held = seq.contextTokens;
    let c = 0;
    while (c < held.length && c < ids.length - 1 && held[c] === ids[c])
        c++;
    if (c < seq.nextTokenIndex)
        await seq.eraseContextTokenRanges([{start: c, end: seq.nextTokenIndex}]);
    const rest = ids.slice(c);
    const t0 = performance.now();
    let r = await seq.controlledEvaluate(rest.map((t, i) => (i === rest.length - 1 ? [t, next] : t)));
    ttft.push(performance.now() - t0);
    let t = r[rest.length - 1].next.token;
    for (let s = 0; s < 63; s++) {
        r = await seq.controlledEvaluate([[t, next]]);
        t = r[0].next.token;
    }
    for (let i = 0; i < 64; i++) // the answer, as the next turn re-sends it
        ids.push(tok(200 + turn, i));
}
console.log(`llama.cpp chat: TTFT per turn (ms): ${ttft.map(x => x.toFixed(0)).join(" ")}; ` +
            `turn 10 / turn 1 = ${(ttft[9] / ttft[0]).toFixed(2)}`);
await ctx.dispose();
await model.dispose();
await llama.dispose();
