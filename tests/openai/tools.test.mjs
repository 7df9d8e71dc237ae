// The openai client's tool loop against kiln's mock: the model calls a tool (the mock's reply
// is Hermes markup), the client sends the call and its result back, the model answers (the
// mock's --mock-tool-reply, given when the prompt holds a tool result); whole and streamed.
// The client is the one installed where node runs (tests/openai: pinned; tests/openai-latest:
// the newest), so one file serves both.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(path.join(process.cwd(), 'package.json'));
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);
const bin = process.env.KILN_BIN_DIR || path.resolve('../../build');
const ARGS = '{"city": "Paris", "when": ["today", 1.50]}';
const CALL = `I will look it up.\n<tool_call>\n{"name": "get_weather", "arguments": ${ARGS}}\n</tool_call>`;
const ANSWER = 'It is sunny in Paris.';
let kiln, client;

before(async () => {
  kiln = spawn(`${bin}/kiln`, ['--model', 'mock', '--port', '0', '--workers', '1',
    '--mock-reply', CALL, '--mock-tool-reply', ANSWER], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`kiln did not start: ${err}`)), 20000);
    kiln.stderr.on('data', (d) => {
      err += d;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    kiln.on('exit', (c) => reject(new Error(`kiln exited ${c}: ${err}`)));
  });
  client = new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((res) => setTimeout(res, 50));
  }
});

after(() => { kiln?.kill('SIGTERM'); });

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const first = [
  { role: 'developer', content: 'Answer briefly.' },
  { role: 'user', content: 'What is the weather in Paris?' },
];

test('tool loop: a call, its result, the answer', async () => {
  const r1 = await client.chat.completions.create({ model: 'mock', messages: first, tools });
  const c1 = r1.choices[0];
  assert.equal(c1.finish_reason, 'tool_calls');
  assert.equal(c1.message.content, 'I will look it up.');
  assert.equal(c1.message.tool_calls.length, 1);
  const call = c1.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.equal(call.function.arguments, ARGS);
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  const args = JSON.parse(call.function.arguments);
  const r2 = await client.chat.completions.create({
    model: 'mock', tools,
    messages: [...first, c1.message,
      { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ city: args.city, sky: 'sunny' }) }],
  });
  assert.equal(r2.choices[0].finish_reason, 'stop');
  assert.equal(r2.choices[0].message.content, ANSWER);
  assert.equal(r2.choices[0].message.tool_calls, undefined);
});

test('tool loop streamed: deltas joined give the same call', async () => {
  const stream = await client.chat.completions.create({ model: 'mock', messages: first, tools, stream: true });
  let content = '', finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    content += ch.delta?.content ?? '';
    for (const tc of ch.delta?.tool_calls ?? []) {
      if (tc.id) calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: '' };
      calls[tc.index].arguments += tc.function?.arguments ?? '';
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, 'I will look it up.');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(calls[0].arguments, ARGS);
  const answer = await client.chat.completions.create({
    model: 'mock', tools, stream: true,
    messages: [...first,
      { role: 'assistant', content: null, tool_calls: calls.map((c) => ({ id: c.id, type: 'function',
        function: { name: c.name, arguments: c.arguments } })) },
      { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' }],
  });
  let text = '';
  for await (const chunk of answer) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, ANSWER);
});

test('a named tool_choice and parallel_tool_calls false are accepted', async () => {
  const r = await client.chat.completions.create({ model: 'mock', messages: first, tools,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false });
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
});

test('arguments that are not JSON are a BadRequestError', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'mock', tools, messages: [...first,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_x', type: 'function',
      function: { name: 'get_weather', arguments: '{city: Paris' } }] },
    { role: 'tool', tool_call_id: 'call_x', content: 'sunny' }] }),
  (e) => e instanceof OpenAI.BadRequestError && /not valid JSON/.test(e.message));
});
