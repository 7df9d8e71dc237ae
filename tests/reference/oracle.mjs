// The oracle: llama.cpp (node-llama-cpp, pinned in package.json) on every model that
// `kiln-mkmodel --oracle DIR` wrote. For each model and prompt it records the top log-
// probabilities of the first steps and the greedy ids into fixtures/NAME.txt, which
// tests/test_oracle.c holds kiln's engine to. `make oracle` runs it.
//   node oracle.mjs MODEL_DIR [FIXTURE_DIR]      (regenerate the fixtures)
//   node oracle.mjs --story MODEL.gguf           (greedy "Once upon a time", 64 tokens)
import fs from "node:fs";
import path from "node:path";
import {getLlama} from "node-llama-cpp";

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const pick = {generateNext: {token: true, probabilities: true, options: {temperature: 0}}};

// Greedy path from ids: per step the sorted probabilities and the chosen id.
async function run(seq, ids, steps) {
    await seq.clearHistory();
    const out = [];
    let input = ids.map((t, i) => (i === ids.length - 1 ? [t, pick] : t));
    for (let s = 0; s < steps; s++) {
        const r = await seq.controlledEvaluate(input);
        const next = r[input.length - 1].next;
        out.push({token: next.token, probs: next.probabilities});
        input = [[next.token, pick]];
    }
    return out;
}

if (process.argv[2] === "--story") {
    const model = await llama.loadModel({modelPath: process.argv[3], defaultContextFlashAttention: false});
    const ctx = await model.createContext({contextSize: 256, sequences: 1, threads: 1, flashAttention: false});
    const ids = [model.tokens.bos, ...model.tokenize("Once upon a time")];
    const out = await run(ctx.getSequence(), ids, 64);
    process.stdout.write("Once upon a time" + model.detokenize(out.map((o) => o.token)) + "\n");
    process.exit(0);
}

const dir = process.argv[2];
const fixtures = process.argv[3] ?? path.join(path.dirname(new URL(import.meta.url).pathname), "fixtures");
if (!dir) {
    console.error("usage: node oracle.mjs MODEL_DIR [FIXTURE_DIR] | --story MODEL.gguf");
    process.exit(2);
}
const man = JSON.parse(fs.readFileSync(path.join(dir, "manifest.json"), "utf8"));
fs.mkdirSync(fixtures, {recursive: true});
const version = JSON.parse(fs.readFileSync(
    path.join(path.dirname(new URL(import.meta.url).pathname), "node_modules/node-llama-cpp/package.json"), "utf8")).version;
let failed = 0;
for (const m of man.models) {
    let model;
    try {
        model = await llama.loadModel({modelPath: path.join(dir, m.file), defaultContextFlashAttention: false});
    } catch (e) {
        console.error(`oracle: ${m.name}: llama.cpp cannot load it: ${e.message}`);
        failed++;
        continue;
    }
    const ctx = await model.createContext({contextSize: man.ctx, sequences: 1, threads: 1, flashAttention: false});
    const seq = ctx.getSequence();
    let text = `# llama.cpp (node-llama-cpp ${version}) on ${m.name}: per prompt its ids, the top ${man.top}\n` +
        `# log-probabilities (id:logprob) of the first ${man.steps} greedy steps, and ${man.greedy} greedy ids\n` +
        `# (id:margin, the log-probability lead over the runner-up).\n` +
        `# Written by tests/reference/oracle.mjs (make oracle); do not edit.\n`;
    for (const ids of man.prompts) {
        const out = await run(seq, ids, man.greedy);
        text += `prompt ${ids.join(" ")}\n`;
        for (let s = 0; s < man.steps; s++) {
            const top = [...out[s].probs.entries()].slice(0, man.top);
            text += `step ${s} ` + top.map(([t, p]) => `${t}:${Math.log(p).toFixed(5)}`).join(" ") + "\n";
        }
        // each greedy id with llama.cpp's margin over the runner-up, in nats
        const margin = (o) => {
            const [a, b] = [...o.probs.values()];
            return Math.log(a) - Math.log(b);
        };
        text += `greedy ${out.map((o) => `${o.token}:${margin(o).toFixed(3)}`).join(" ")}\n`;
    }
    fs.writeFileSync(path.join(fixtures, `${m.name}.txt`), text);
    await ctx.dispose();
    await model.dispose();
    console.log(`oracle: ${m.name}`);
}
if (failed) {
    console.error(`oracle: ${failed} models failed`);
    process.exit(1);
}
