// The chat page at / in a real browser (Debian's Chromium driven by playwright-core), against
// kiln on the mock model (a markdown reply, a delay per token, injectable faults) and on
// stories260K. Screenshots of the main states go to $KILN_WEBUI_ARTIFACTS (build/webui-test).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, SHARED, launchBrowser, openPage, shot, startKiln, until } from './lib.mjs';

// The mock's reply: markdown with a table and a code block, and three ways a hostile answer
// could try to run script.
const REPLY = [
  '# Shopping list',
  '',
  'Some **bold** text, `inline code` and a [safe link](https://example.com/docs).',
  '',
  '| item | qty |',
  '|------|----:|',
  '| eggs | 12 |',
  '| milk | 2 |',
  '',
  '```c',
  'int main(void) { return 0; }',
  '```',
  '',
  '<script>window.__xss = "script"; alert(1)</script>',
  '<img src="x" onerror="window.__xss = \'img\'; alert(2)">',
  '[bad link](javascript:window.__xss=1)',
].join('\n');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

const assistant = (page) => page.locator('.msg.assistant').last();

async function send(page, text) {
  await page.locator('#input').fill(text);
  await page.locator('#input').press('Enter');
}

async function answered(page) {
  await page.locator('#stop').waitFor({ state: 'hidden', timeout: 30000 });
  await assistant(page).locator('.stats').filter({ hasText: /./ }).waitFor({ timeout: 5000 }).catch(() => {});
}

function clean(seen) {
  assert.deepEqual(seen.dialogs, [], 'no script ran (no dialog opened)');
  assert.deepEqual(seen.foreign, [], 'no request left kiln\'s origin');
  const csp = seen.errors.filter((e) => /Content Security Policy|Refused to/i.test(e));
  assert.deepEqual(csp, [], 'nothing the page does breaks its Content-Security-Policy');
}

describe('on the mock (markdown reply, 8 ms per token, faults on)', () => {
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', 'mock', '--mock-reply', REPLY, '--mock-delay-ms', '8',
      '--mock-faults', '--max-sequences', '2', '--restart-backoff-ms', '50']);
  });
  after(async () => { await kiln?.stop(); });

  test('the page shows the model, its context length and worker health', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await until(async () => (await page.locator('#model-name').textContent()) === 'mock', 10000, 'the model name');
    assert.match(await page.locator('#model-ctx').textContent(), /context 4,096 tokens/);
    await until(async () => /^ok · 1\/1 worker ready/.test(await page.locator('#health').textContent()),
      10000, 'worker health');
    await shot(page, 'empty.png');
    clean(seen);
    await page.close();
  });

  test('a message streams in, then shows TTFT and tokens/s', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await send(page, 'Make me a shopping list');
    await assistant(page).waitFor();
    // part of the answer is on screen while the rest is still coming
    await page.waitForFunction(() => {
      const m = [...document.querySelectorAll('.msg.assistant')].pop();
      const t = m && m.querySelector('.content').textContent;
      return m && m.classList.contains('pending') && t.length > 5 && !t.includes('milk');
    }, null, { timeout: 15000 });
    assert.equal(await page.locator('#stop').isVisible(), true);
    await shot(page, 'streaming.png');
    await answered(page);
    const stats = await assistant(page).locator('.stats').textContent();
    assert.match(stats, /TTFT \d+ ms · [\d.]+ tokens\/s · \d+ tokens/);
    clean(seen);
    await page.close();
  });

  test('markdown, a table and a highlighted code block render; hostile markup does not run', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await send(page, 'Again, please');
    await answered(page);
    const a = assistant(page);
    assert.equal(await a.locator('.content h1').textContent(), 'Shopping list');
    assert.equal(await a.locator('.content strong').textContent(), 'bold');
    assert.equal(await a.locator('.content table td').nth(1).textContent(), '12');
    assert.equal(await a.locator('.content table td').nth(1).evaluate((td) => getComputedStyle(td).textAlign),
      '-webkit-right', 'a ---: column is right-aligned (the align attribute survives)');
    assert.ok(await a.locator('.content pre code.hljs').count() === 1, 'the code block is highlighted');
    assert.ok(await a.locator('.content pre code .hljs-keyword, .content pre code .hljs-type').count() > 0);
    assert.equal(await a.locator('.code-bar span').textContent(), 'c');
    const link = a.locator('.content a', { hasText: 'safe link' });
    assert.equal(await link.getAttribute('target'), '_blank');
    assert.match(await link.getAttribute('rel'), /noopener/);
    // the attacks: nothing ran and nothing of them is left in the page
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.equal(await a.locator('.content script').count(), 0);
    assert.equal(await a.locator('.content [onerror]').count(), 0);
    const bad = await a.locator('.content a', { hasText: 'bad link' }).getAttribute('href').catch(() => null);
    assert.ok(!bad || !/^javascript:/i.test(bad), `the javascript: link was neutralised (${bad})`);
    await shot(page, 'markdown.png');
    clean(seen);
    await page.close();
  });

  test('keyboard: Shift+Enter breaks the line, Enter sends, Escape stops; every control is labelled', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await page.locator('#new-chat').click();
    const input = page.locator('#input');
    await input.focus();
    await page.keyboard.type('line one');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('line two');
    assert.equal(await input.inputValue(), 'line one\nline two');
    assert.equal(await page.locator('.msg').count(), 0, 'nothing sent yet');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => {
      const m = [...document.querySelectorAll('.msg.assistant')].pop();
      return m && m.querySelector('.content').textContent.length > 3;
    }, null, { timeout: 15000 });
    assert.equal(await page.locator('.msg.user .content').textContent(), 'line one\nline two');
    await page.keyboard.press('Escape');
    await page.locator('#send').waitFor();
    assert.match(await assistant(page).locator('.stats').textContent(), /stopped/);
    // every button, field and list has a name a screen reader can say
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, input, textarea, select')]
      .filter((el) => el.offsetParent !== null || el.closest('dialog'))
      .filter((el) => !(el.getAttribute('aria-label') || (el.labels && el.labels.length) ||
        el.textContent.trim()))
      .map((el) => el.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, []);
    clean(seen);
    await page.close();
  });

  test('without the libraries (a build where npm was unreachable) answers show as plain text', async () => {
    const page = await browser.context.newPage();
    await page.route('**/webui/lib/**', (route) => route.fulfill({ status: 404, body: '' }));
    await page.goto(kiln.url);
    await page.locator('#new-chat').click();
    await send(page, 'plain, please');
    await answered(page);
    const content = assistant(page).locator('.content');
    assert.equal(await content.getAttribute('class'), 'content plain');
    assert.match(await content.textContent(), /^# Shopping list\n/);
    assert.equal(await content.locator('*').count(), 0, 'no element made from the answer');
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    await page.close();
  });

  test('Stop ends the stream and /health shows the slot free', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await send(page, 'A long answer, please');
    await page.waitForFunction(() => {
      const m = [...document.querySelectorAll('.msg.assistant')].pop();
      return m && m.querySelector('.content').textContent.length > 3;
    }, null, { timeout: 15000 });
    assert.equal((await kiln.health()).running, 1, 'the answer holds a slot while it streams');
    await page.locator('#stop').click();
    await page.locator('#send').waitFor();
    await until(async () => (await kiln.health()).running === 0, 5000, '/health running 0');
    const h = await kiln.health();
    assert.equal(h.workers[0].running, 0);
    assert.match(await assistant(page).locator('.stats').textContent(), /stopped/);
    assert.ok(!(await assistant(page).locator('.content').textContent()).includes('milk'),
      'the answer was cut short');
    clean(seen);
    await page.close();
  });

  test('regenerate, edit the last message, and the conversation list', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await page.locator('#new-chat').click();
    await send(page, 'first question');
    await answered(page);
    await assistant(page).getByRole('button', { name: 'Regenerate this answer' }).click();
    await answered(page);
    assert.equal(await page.locator('.msg').count(), 2, 'regenerate replaces the answer');
    await page.getByRole('button', { name: 'Edit this message and send it again' }).click();
    await page.getByRole('textbox', { name: 'Edit your message' }).fill('edited question');
    await page.getByRole('button', { name: 'Save the edit and send it again' }).click();
    await answered(page);
    assert.equal(await page.locator('.msg.user .content').textContent(), 'edited question');
    assert.equal(await page.locator('.msg').count(), 2);
    // rename, export, delete and undo
    const item = page.locator('#conversations li.current');
    await item.getByRole('button', { name: /^Rename/ }).click();
    await page.getByRole('textbox', { name: 'Conversation name' }).fill('Groceries');
    await page.getByRole('textbox', { name: 'Conversation name' }).press('Enter');
    assert.equal(await page.locator('#conversations li.current .conv-title').textContent(), 'Groceries');
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.locator('#conversations li.current').getByRole('button', { name: /^Export/ }).click(),
    ]);
    assert.equal(download.suggestedFilename(), 'Groceries.json');
    const exported = JSON.parse(await new Promise((resolve, reject) => {
      download.createReadStream().then((s) => {
        let t = '';
        s.on('data', (d) => { t += d; });
        s.on('end', () => resolve(t));
        s.on('error', reject);
      }, reject);
    }));
    assert.equal(exported.title, 'Groceries');
    assert.equal(exported.messages[0].content, 'edited question');
    await page.reload();
    assert.equal(await page.locator('#conversations li.current .conv-title').textContent(), 'Groceries',
      'the list survives a reload');
    await page.locator('#conversations li.current').getByRole('button', { name: /^Delete/ }).click();
    assert.equal(await page.locator('#conversations .conv-title', { hasText: 'Groceries' }).count(), 0);
    await page.locator('#notice-action', { hasText: 'Undo' }).click();
    assert.equal(await page.locator('#conversations .conv-title', { hasText: 'Groceries' }).count(), 1);
    clean(seen);
    await page.close();
  });

  test('settings persist across a reload and go into the request', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await page.getByRole('button', { name: 'Settings' }).click();
    await page.getByLabel('System prompt').fill('You are terse.');
    await page.getByLabel('Temperature').fill('0.3');
    await page.getByLabel('Max tokens').fill('300');
    await page.getByLabel('Top-p').fill('0.9');
    await page.getByLabel(/^Seed/).fill('42');
    await shot(page, 'settings.png');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.reload();
    await page.getByRole('button', { name: 'Settings' }).click();
    assert.equal(await page.getByLabel('System prompt').inputValue(), 'You are terse.');
    assert.equal(await page.getByLabel('Temperature').inputValue(), '0.3');
    assert.equal(await page.getByLabel('Max tokens').inputValue(), '300');
    assert.equal(await page.getByLabel('Top-p').inputValue(), '0.9');
    assert.equal(await page.getByLabel(/^Seed/).inputValue(), '42');
    await page.getByRole('button', { name: 'Cancel' }).click();
    await page.locator('#new-chat').click();
    await send(page, 'hello');
    await answered(page);
    const req = seen.requests.filter((r) => r.url.endsWith('/v1/chat/completions')).pop();
    const body = JSON.parse(req.body);
    assert.equal(body.temperature, 0.3);
    assert.equal(body.max_tokens, 300);
    assert.equal(body.top_p, 0.9);
    assert.equal(body.seed, 42);
    assert.equal(body.stream, true);
    assert.deepEqual(body.messages, [{ role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'hello' }]);
    // back to the defaults for the other tests
    await page.getByRole('button', { name: 'Settings' }).click();
    await page.getByRole('button', { name: 'Defaults' }).click();
    await page.getByRole('button', { name: 'Save' }).click();
    clean(seen);
    await page.close();
  });

  test('a worker crash during an answer shows a clear error, and kiln recovers', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await page.locator('#new-chat').click();
    await send(page, 'please crash [[kiln:abort]]');
    const err = assistant(page).locator('.msg-error');
    await err.waitFor({ timeout: 20000 });
    assert.match(await err.textContent(), /worker crashed while answering/);
    await page.locator('#send').waitFor();
    await shot(page, 'crash.png');
    await until(async () => (await kiln.health()).status === 'ok', 15000, 'the worker back');
    await page.locator('#new-chat').click(); // (the crashing prompt stays out of the history)
    await send(page, 'and now a normal question');
    await answered(page);
    assert.match(await assistant(page).locator('.content').textContent(), /Shopping list/);
    clean(seen);
    await page.close();
  });
});

describe('busy: --max-concurrent-requests 1', () => {
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', 'mock', '--mock-delay-ms', '20', '--max-concurrent-requests', '1',
      '--mock-reply', 'x'.repeat(400)]);
  });
  after(async () => { await kiln?.stop(); });

  test('a 429 says the server is busy and the page retries after Retry-After', async () => {
    // another client holds the only admission
    const ctl = new AbortController();
    const other = await fetch(`${kiln.url}v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    assert.equal(other.status, 200);
    const { page, seen } = await openPage(browser.context, kiln);
    await send(page, 'hello?');
    const notice = page.locator('#notice');
    await until(async () => /busy .*HTTP 429.*Retrying in \d+ s/.test(await notice.textContent()), 10000,
      'the busy notice');
    await shot(page, 'busy.png');
    ctl.abort(); // the other client leaves: the retry gets in
    await other.body?.cancel().catch(() => {});
    await answered(page);
    assert.match(await assistant(page).locator('.content').textContent(), /^x+\s*$/);
    assert.equal(await notice.isVisible(), false);
    clean(seen);
    await page.close();
  });
});

describe('with an API key', () => {
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', 'mock', '--api-key', 'sesame-1']);
  });
  after(async () => { await kiln?.stop(); });

  test('the page loads without a key, asks for one, calls nothing before it, then works', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    const dialog = page.getByRole('dialog', { name: 'API key' });
    await dialog.waitFor();
    await shot(page, 'api-key.png');
    const called = seen.requests.filter((r) => /\/(v1\/|health)/.test(r.url));
    assert.deepEqual(called, [], 'no API call without a key');
    await dialog.getByLabel('API key').fill('wrong-key');
    await dialog.getByRole('button', { name: 'Use this key' }).click();
    // the wrong key is refused: asked again
    await until(async () => /refused/.test(await page.locator('#key-why').textContent()), 10000,
      'the refusal');
    await dialog.getByLabel('API key').fill('sesame-1');
    await dialog.getByRole('button', { name: 'Use this key' }).click();
    await until(async () => (await page.locator('#model-name').textContent()) === 'mock', 10000, 'the model');
    await send(page, 'hi');
    await answered(page);
    assert.ok((await assistant(page).locator('.content').textContent()).length > 0);
    const chat = seen.requests.filter((r) => r.url.endsWith('/v1/chat/completions')).pop();
    assert.equal(chat.headers.authorization, 'Bearer sesame-1');
    // the key is remembered
    await page.reload();
    await until(async () => (await page.locator('#model-name').textContent()) === 'mock', 10000, 'the model');
    assert.equal(await dialog.isVisible(), false);
    await page.close();
  });
});

describe('on stories260K', () => {
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', `${SHARED}/models/stories260K.gguf`]);
  });
  after(async () => { await kiln?.stop(); });

  test('a real model answers; light, dark and phone layouts', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    await until(async () => (await page.locator('#model-name').textContent()) !== '…', 10000, 'the model');
    await page.getByRole('button', { name: 'Settings' }).click();
    await page.getByLabel('Max tokens').fill('60');
    await page.getByLabel(/^Seed/).fill('7');
    await page.getByRole('button', { name: 'Save' }).click();
    await send(page, 'Once upon a time, Lily');
    await answered(page);
    const text = await assistant(page).locator('.content').textContent();
    assert.ok(text.trim().length > 10, `an answer came (${text})`);
    assert.match(await assistant(page).locator('.stats').textContent(), /tokens\/s/);
    await shot(page, 'stories260k-light.png');
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const light = await bg();
    await page.emulateMedia({ colorScheme: 'dark', reducedMotion: 'reduce' });
    assert.notEqual(await bg(), light, 'the dark theme follows the system');
    await shot(page, 'stories260k-dark.png');
    // a phone: one column, nothing wider than the screen, the list is a drawer
    await page.setViewportSize({ width: 390, height: 780 });
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'no sideways scroll');
    assert.equal(await page.locator('#sidebar').isVisible(), false, 'the list is put away');
    assert.equal(await page.locator('#input').isVisible(), true);
    await shot(page, 'phone.png');
    await page.getByRole('button', { name: 'Show the conversation list' }).click();
    await page.locator('#sidebar').getByRole('button', { name: 'New chat' }).waitFor();
    assert.equal((await page.locator('#sidebar').boundingBox()).x, 0);
    await shot(page, 'phone-sidebar.png');
    await page.keyboard.press('Escape');
    assert.equal(await page.locator('#sidebar').isVisible(), false, 'Escape puts it away');
    await page.emulateMedia({ colorScheme: 'light', reducedMotion: 'no-preference' });
    await page.setViewportSize({ width: 1200, height: 800 });
    clean(seen);
    await page.close();
    console.log(`screenshots in ${ARTIFACTS}`);
  });
});

describe('the picture in the README', () => {
  const reply = [
    'Here is a small C function that adds two numbers:',
    '',
    '```c',
    '#include <stdint.h>',
    '',
    '/* Returns a + b; the caller checks for overflow. */',
    'int64_t add(int64_t a, int64_t b)',
    '{',
    '    return a + b;',
    '}',
    '```',
    '',
    'And the cases to test it with:',
    '',
    '| a | b | expected |',
    '|---:|---:|---:|',
    '| 2 | 3 | 5 |',
    '| -1 | 1 | 0 |',
    '| 0 | 0 | 0 |',
    '',
    'Each row is one **assert** in the test.',
  ].join('\n');
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', 'mock', '--mock-reply', reply, '--mock-delay-ms', '2']);
  });
  after(async () => { await kiln?.stop(); });

  test('a conversation with code and a table', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    for (const q of ['Tell me a story about a kiln', 'What is continuous batching?']) {
      await page.locator('#new-chat').click();
      await send(page, q);
      await answered(page);
    }
    await page.locator('#new-chat').click();
    await send(page, 'Write a C function that adds two numbers, and a table of test cases');
    await answered(page);
    assert.equal(await assistant(page).locator('.content table tr').count(), 4);
    await until(async () => / 0 running/.test(await page.locator('#health').textContent()), 10000, 'health');
    await shot(page, 'readme.png');
    clean(seen);
    await page.close();
  });
});

describe('reasoning and tool calls', () => {
  let kiln;
  before(async () => {
    kiln = await startKiln(['--model', 'mock', '--mock-delay-ms', '2', '--mock-reply',
      '<think>The user wants the weather; the tool knows it.</think>Let me look that up.' +
      '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']);
  });
  after(async () => { await kiln?.stop(); });

  test('reasoning_content is shown folded and tool calls as such', async () => {
    const { page, seen } = await openPage(browser.context, kiln);
    // the page defines no tools; a client that did would get calls back: add one on the way
    await page.route('**/v1/chat/completions', (route) => {
      const body = JSON.parse(route.request().postData());
      body.tools = [{ type: 'function', function: { name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
      return route.continue({ postData: JSON.stringify(body) });
    });
    await send(page, 'What is the weather in Paris?');
    await answered(page);
    const a = assistant(page);
    const details = a.locator('details.reasoning');
    assert.equal(await details.isVisible(), true);
    assert.equal(await details.getAttribute('open'), null, 'folded');
    assert.equal(await a.locator('.reasoning-text').isVisible(), false);
    await details.locator('summary').click();
    assert.equal(await a.locator('.reasoning-text').textContent(),
      'The user wants the weather; the tool knows it.');
    await page.locator('#conversations li.current .conv-title').click(); // redraws the messages
    assert.equal(await assistant(page).locator('.reasoning-text').isVisible(), true, 'stays unfolded');
    assert.equal(await a.locator('.tool-call .tool-head').textContent(), 'Tool call: get_weather');
    assert.deepEqual(JSON.parse(await a.locator('.tool-call pre').textContent()), { city: 'Paris' });
    assert.equal((await a.locator('.content').textContent()).trim(), 'Let me look that up.');
    await shot(page, 'reasoning-tools.png');
    clean(seen);
    await page.close();
  });
});
