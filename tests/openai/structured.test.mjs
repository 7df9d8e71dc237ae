// Structured output, end to end, checked by an independent validator (ajv 8 with
// ajv-formats): for each schema below, on stories260K and on a random-weight model made by
// kiln-mkmodel (junk unconstrained), 50 generations at temperature 1; every one that ends with
// finish_reason "stop" must parse and validate, and the others must say "length". Prints the
// validity figures. Also: the openai client's zod helper parses kiln's answers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const bin = process.env.KILN_BIN_DIR || path.resolve('../../build');
const shared = process.env.KILN_SHARED || path.resolve('../../../shared');
const PER_SCHEMA = Number(process.env.KILN_STRUCTURED_N || 50);
const servers = [];
let tmp;

async function startKiln(model) {
  const kiln = spawn(`${bin}/kiln`, ['--model', model, '--port', '0', '--workers', '1',
    '--max-sequences', '8'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`kiln did not start: ${err}`)), 30000);
    kiln.stderr.on('data', (d) => {
      err += d;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    kiln.on('exit', (c) => reject(new Error(`kiln exited ${c}: ${err}`)));
  });
  for (let i = 0; i < 400; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  servers.push(kiln);
  return new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
}

const clients = {};
before(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'kiln-structured-'));
  const junk = path.join(tmp, 'junk.gguf');
  execFileSync(`${bin}/kiln-mkmodel`, ['--out', junk, '--preset', 'tiny', '--seed', '7']);
  clients.stories = await startKiln(`${shared}/models/stories260K.gguf`);
  clients.junk = await startKiln(junk);
});

after(() => {
  for (const k of servers) k.kill('SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const str = (n) => ({ type: 'string', maxLength: n });
const schemas = {
  flat: { type: 'object', properties: { name: str(12), age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name', 'age'], additionalProperties: false },
  optional: { type: 'object', properties: { a: { type: 'boolean' }, b: str(5), c: { type: 'null' } }, required: ['b'], additionalProperties: false },
  nested: { type: 'object', properties: { user: { type: 'object', properties: { id: { type: 'integer', minimum: 1, maximum: 9999 }, tags: { type: 'array', items: str(6), maxItems: 3 } }, required: ['id', 'tags'], additionalProperties: false } }, required: ['user'], additionalProperties: false },
  array_bounds: { type: 'array', items: { type: 'integer', minimum: -50, maximum: 50 }, minItems: 2, maxItems: 4 },
  tuple: { type: 'array', prefixItems: [str(4), { type: 'boolean' }, { enum: ['x', 'y'] }], items: false },
  enum_str: { enum: ['red', 'green', 'blue'] },
  enum_mixed: { enum: ['a', 1, null, true, { k: [1, 2] }] },
  const: { type: 'object', properties: { v: { const: 'fixed' } }, required: ['v'], additionalProperties: false },
  any_of: { anyOf: [{ type: 'integer', minimum: 0, maximum: 9 }, { type: 'array', items: { type: 'boolean' }, maxItems: 2 }] },
  one_of: { oneOf: [{ type: 'string', maxLength: 3 }, { type: 'integer', minimum: 0, maximum: 99 }] },
  all_of: { allOf: [{ type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 5 } }, required: ['a'] }, { type: 'object', properties: { b: { type: 'boolean' } }, required: ['b'] }], unevaluatedProperties: undefined },
  recursion: { $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['v', 'kids'], additionalProperties: false } }, $ref: '#/$defs/node' },
  definitions: { definitions: { p: { type: 'object', properties: { x: { type: 'number', minimum: -1, maximum: 1 } }, required: ['x'], additionalProperties: false } }, type: 'array', items: { $ref: '#/definitions/p' }, maxItems: 3 },
  pattern_code: { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2,4}$' } }, required: ['code'], additionalProperties: false },
  pattern_alt: { type: 'string', pattern: '^(cat|dog|bird)s?( [a-z]{1,5})?$' },
  date: { type: 'string', format: 'date' },
  time: { type: 'string', format: 'time' },
  date_time: { type: 'object', properties: { at: { type: 'string', format: 'date-time' }, id: { type: 'string', format: 'uuid' } }, required: ['at', 'id'], additionalProperties: false },
  email: { type: 'object', properties: { to: { type: 'string', format: 'email' } }, required: ['to'], additionalProperties: false },
  numbers: { type: 'object', properties: { i: { type: 'integer', exclusiveMinimum: 10, maximum: 1000 }, n: { type: 'number', minimum: 0, maximum: 100 } }, required: ['i', 'n'], additionalProperties: false },
  nullable_types: { type: 'object', properties: { s: { type: ['string', 'null'], maxLength: 4 }, k: { type: ['integer', 'boolean'], minimum: 0, maximum: 3 } }, required: ['s', 'k'], additionalProperties: false },
  extra_props: { type: 'object', properties: { id: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['id'], additionalProperties: { type: 'boolean' } },
  string_lengths: { type: 'array', items: { type: 'string', minLength: 2, maxLength: 4 }, minItems: 1, maxItems: 2 },
};
delete schemas.all_of.unevaluatedProperties;

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

const MAX_TOKENS = { stories: 200, junk: 200 };
const figures = [];

async function sample(client, schema, model) {
  const out = [];
  const batches = [];
  for (let done = 0; done < PER_SCHEMA; done += 8) {
    const n = Math.min(8, PER_SCHEMA - done);
    batches.push(client.chat.completions.create({
      model: undefined, messages: [{ role: 'user', content: 'Give me JSON.' }], temperature: 1,
      max_tokens: MAX_TOKENS[model], n, seed: 1000 + done,
      response_format: { type: 'json_schema', json_schema: { name: 't', schema, strict: true } },
    }));
  }
  for (const r of await Promise.all(batches))
    for (const c of r.choices) out.push(c);
  return out;
}

for (const model of ['stories', 'junk']) {
  test(`structured output on ${model}: every finished generation validates (ajv)`, async () => {
    let total = 0, valid = 0, length = 0;
    const byLength = [];
    for (const [name, schema] of Object.entries(schemas)) {
      const before = length;
      const validate = ajv.compile(schema);
      const choices = await sample(clients[model], schema, model);
      assert.equal(choices.length, PER_SCHEMA);
      for (const c of choices) {
        total++;
        if (c.finish_reason === 'length') { length++; continue; }
        assert.equal(c.finish_reason, 'stop', `${name}: finish_reason ${c.finish_reason}`);
        let v;
        try { v = JSON.parse(c.message.content); } catch (e) {
          assert.fail(`${model}/${name}: not JSON: ${JSON.stringify(c.message.content)}`);
        }
        assert.ok(validate(v), `${model}/${name}: ${JSON.stringify(v)} fails: ${ajv.errorsText(validate.errors)}`);
        valid++;
      }
      if (length > before) byLength.push(`${name} ${length - before}`);
    }
    const line = `${model}: ${Object.keys(schemas).length} schemas x ${PER_SCHEMA}: ${total} generations, ` +
      `${valid} valid, ${length} stopped by max_tokens (finish_reason length: ${byLength.join(', ') || 'none'}), 0 invalid`;
    figures.push(line);
    console.log(`# ${line}`);
    assert.equal(valid + length, total);
  });
}

test('the openai client parses kiln answers with its zod structured-output helper', async () => {
  const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(99), pet: z.enum(['cat', 'dog']) });
  const r = await clients.stories.beta.chat.completions.parse({
    model: undefined, messages: [{ role: 'user', content: 'A person, please.' }], temperature: 1, seed: 3,
    max_tokens: 200, response_format: zodResponseFormat(Person, 'person'),
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(m.parsed, 'parsed is set');
  assert.deepEqual(Person.parse(m.parsed), m.parsed);
  // and with a plain JSON schema through the same helper path
  const r2 = await clients.junk.beta.chat.completions.parse({
    model: undefined, messages: [{ role: 'user', content: 'x' }], temperature: 1, seed: 4, max_tokens: 200,
    response_format: { type: 'json_schema', json_schema: { name: 'n', strict: true, schema: schemas.flat } },
  });
  assert.equal(r2.choices[0].finish_reason, 'stop');
  assert.ok(ajv.validate(schemas.flat, JSON.parse(r2.choices[0].message.content)));
});

test('a schema kiln cannot compile is a 400 naming the keyword', async () => {
  await assert.rejects(clients.stories.chat.completions.create({
    messages: [{ role: 'user', content: 'x' }], model: undefined,
    response_format: { type: 'json_schema', json_schema: { name: 'b', schema: { type: 'object', minProperties: 1 } } },
  }), (e) => e.status === 400 && /minProperties/.test(e.message));
});
