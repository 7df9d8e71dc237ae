// The official openai client against kiln on stories260K: chat and completions, whole and
// streamed, stream_options, a stop string, n = 2, logprobs, a bad API key and an over-long
// prompt. kiln is spawned here (--port 0) and its port read from its stderr.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

// the client installed where node runs: tests/openai (pinned) or tests/openai-latest
const require = createRequire(path.join(process.cwd(), 'package.json'));
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);

const bin = process.env.KILN_BIN_DIR || path.resolve('../../build');
const shared = process.env.KILN_SHARED || path.resolve('../../../shared');
const KEY = 'test-key-1';
let kiln, client, port;

before(async () => {
  kiln = spawn(`${bin}/kiln`, ['--model', `${shared}/models/stories260K.gguf`, '--port', '0',
    '--api-key', KEY, '--workers', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
  port = await new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`kiln did not start: ${err}`)), 20000);
    kiln.stderr.on('data', (d) => {
      err += d;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    kiln.on('exit', (c) => reject(new Error(`kiln exited ${c}: ${err}`)));
  });
  client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  // wait until the worker is ready
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((res) => setTimeout(res, 50));
  }
});

after(() => { kiln?.kill('SIGTERM'); });

async function modelName() {
  const list = await client.models.list();
  return list.data[0].id;
}

test('models lists the served model with its context length', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.ok(list.data[0].context_length > 0);
});

test('completion whole and streamed agree (greedy)', async () => {
  const m = await modelName();
  const whole = await client.completions.create({ model: m, prompt: 'Once upon a time', max_tokens: 20 });
  assert.equal(whole.object, 'text_completion');
  assert.ok(whole.choices[0].text.length > 0);
  const stream = await client.completions.create({ model: m, prompt: 'Once upon a time', max_tokens: 20,
    stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += c.text;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('chat whole and streamed, with a stop string', async () => {
  const m = await modelName();
  const msgs = [{ role: 'user', content: 'Tell me a story.' }];
  const whole = await client.chat.completions.create({ model: m, messages: msgs, max_tokens: 30 });
  assert.equal(whole.choices[0].message.role, 'assistant');
  const full = whole.choices[0].message.content;
  assert.ok(full.length > 3);
  const stop = full.slice(2, 4);
  const stopped = await client.chat.completions.create({ model: m, messages: msgs, max_tokens: 30, stop: [stop] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  const stream = await client.chat.completions.create({ model: m, messages: msgs, max_tokens: 30, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, full);
});

test('n = 2 gives two indexed choices', async () => {
  const m = await modelName();
  const r = await client.chat.completions.create({ model: m, n: 2, temperature: 1, seed: 3,
    messages: [{ role: 'user', content: 'Hi' }], max_tokens: 10 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
});

test('logprobs: chat tokens with alternatives, completions in their shape', async () => {
  const m = await modelName();
  const r = await client.chat.completions.create({ model: m, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 5, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Array.isArray(t.bytes));
  }
  const c = await client.completions.create({ model: m, prompt: 'Once', max_tokens: 5, logprobs: 2 });
  assert.equal(c.choices[0].logprobs.tokens.length, 5);
  assert.equal(c.choices[0].logprobs.top_logprobs[0] && Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
});

test('a bad API key raises AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'nope', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), OpenAI.AuthenticationError);
});

test('an over-long prompt raises BadRequestError', async () => {
  const m = await modelName();
  await assert.rejects(client.completions.create({ model: m, prompt: 'word '.repeat(5000), max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

test('another model name is NotFoundError', async () => {
  await assert.rejects(client.completions.create({ model: 'gpt-4o', prompt: 'x', max_tokens: 1 }),
    OpenAI.NotFoundError);
});
