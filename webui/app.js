// The chat page: conversations, the composer, streaming answers from /v1/chat/completions,
// Stop, regenerate, edit, settings, the API key prompt, the model and health bar. Storage is
// store.js's, HTTP is api.js's, turning answers into content is render.js's.
import { ApiError, getJSON, streamChat } from './api.js';
import { copyButton, renderMarkdown, richText } from './render.js';
import * as store from './store.js';

const $ = (id) => document.getElementById(id);
const HEALTH_EVERY_MS = 5000;
const BUSY_RETRIES = 5;

// the answers whose reasoning the reader unfolded (this page view only)
const openReasoning = new WeakSet();

const state = {
  settings: store.loadSettings(),
  conversations: store.loadConversations(),
  current: null,        // the shown conversation
  apiKey: store.loadApiKey(),
  keyRequired: false,
  model: null,          // { id, context_length }
  stream: null,         // { controller, msg } while an answer streams
  started: false,       // the API calls began (a key is there when one is needed)
  healthTimer: 0,
  undo: null,
};

// ---- notices ----

function notify(text, action = null, kind = 'error') {
  const n = $('notice');
  $('notice-text').textContent = text;
  n.dataset.kind = kind;
  const b = $('notice-action');
  if (action) {
    b.textContent = action.label;
    b.onclick = () => { hideNotice(); action.run(); };
    b.hidden = false;
  } else {
    b.hidden = true;
    b.onclick = null;
  }
  n.hidden = false;
}

function hideNotice() {
  $('notice').hidden = true;
}

function persist() {
  const why = store.saveConversations(state.conversations);
  if (why) notify(why);
}

// ---- conversations ----

function currentConversation() {
  if (!state.current) {
    const c = store.newConversation();
    state.conversations.unshift(c);
    state.current = c;
    store.saveCurrent(c.id);
  }
  return state.current;
}

function selectConversation(id) {
  if (state.stream) return;
  state.current = state.conversations.find((c) => c.id === id) || null;
  store.saveCurrent(state.current ? state.current.id : null);
  renderConversations();
  renderMessages();
  closeSidebar();
}

function newChat() {
  if (state.stream) return;
  state.current = null;
  store.saveCurrent(null);
  renderConversations();
  renderMessages();
  closeSidebar();
  $('input').focus();
}

function titleOf(c) {
  return c.title || 'New conversation';
}

function exportConversation(c) {
  const data = JSON.stringify({ ...c, exported: new Date().toISOString(),
    model: state.model ? state.model.id : null }, null, 2);
  const url = URL.createObjectURL(new Blob([data], { type: 'application/json' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = `${(c.title || 'conversation').replace(/[^\w.-]+/g, '_').slice(0, 60)}.json`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function deleteConversation(c) {
  if (state.stream && state.current === c) return;
  const at = state.conversations.indexOf(c);
  if (at < 0) return;
  state.conversations.splice(at, 1);
  if (state.current === c) {
    state.current = null;
    store.saveCurrent(null);
    renderMessages();
  }
  persist();
  renderConversations();
  notify(`Deleted “${titleOf(c)}”.`, {
    label: 'Undo',
    run: () => {
      state.conversations.splice(Math.min(at, state.conversations.length), 0, c);
      persist();
      renderConversations();
    },
  }, 'info');
}

function startRename(li, c) {
  const input = document.createElement('input');
  input.type = 'text';
  input.value = c.title;
  input.className = 'rename';
  input.setAttribute('aria-label', 'Conversation name');
  li.replaceChildren(input);
  input.focus();
  input.select();
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    if (save) {
      c.title = input.value.trim().slice(0, 200);
      persist();
    }
    renderConversations();
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); finish(true); }
    if (e.key === 'Escape') { e.preventDefault(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
}

function smallButton(text, label, run) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'small';
  b.textContent = text;
  b.setAttribute('aria-label', label);
  b.title = label;
  b.addEventListener('click', run);
  return b;
}

function renderConversations() {
  const ul = $('conversations');
  ul.replaceChildren();
  for (const c of state.conversations) {
    if (!c.messages.length && c !== state.current) continue;
    const li = document.createElement('li');
    if (c === state.current) li.className = 'current';
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'conv-title';
    open.textContent = titleOf(c);
    if (c === state.current) open.setAttribute('aria-current', 'true');
    open.addEventListener('click', () => selectConversation(c.id));
    const name = titleOf(c);
    li.append(open,
      smallButton('✎', `Rename “${name}”`, () => startRename(li, c)),
      smallButton('⤓', `Export “${name}” as JSON`, () => exportConversation(c)),
      smallButton('✕', `Delete “${name}”`, () => deleteConversation(c)));
    ul.appendChild(li);
  }
}

// ---- messages ----

function fmtStats(s) {
  if (!s) return '';
  const parts = [];
  if (s.ttft_ms != null) parts.push(`TTFT ${Math.round(s.ttft_ms)} ms`);
  if (s.tokens_per_s != null) parts.push(`${s.tokens_per_s.toFixed(1)} tokens/s`);
  if (s.tokens != null) parts.push(`${s.tokens} tokens`);
  if (s.finish === 'length') parts.push('stopped at max tokens');
  else if (s.finish && s.finish !== 'stop') parts.push(s.finish);
  return parts.join(' · ');
}

function renderToolCalls(box, calls) {
  box.replaceChildren();
  for (const t of calls) {
    const d = document.createElement('div');
    d.className = 'tool-call';
    const head = document.createElement('div');
    head.className = 'tool-head';
    head.textContent = `Tool call: ${t.function?.name || '(unnamed)'}`;
    const pre = document.createElement('pre');
    let args = t.function?.arguments || '';
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* partial: as sent */ }
    pre.textContent = args;
    d.append(head, pre);
    box.appendChild(d);
  }
  box.hidden = calls.length === 0;
}

// Update a message element from its message (the streaming path calls this per frame).
function fillMessage(el, m, final) {
  const reasoning = el.querySelector('.reasoning');
  if (m.reasoning) {
    reasoning.hidden = false;
    reasoning.querySelector('.reasoning-text').textContent = m.reasoning;
    reasoning.querySelector('summary').textContent =
      m.pending && !m.content ? 'Reasoning…' : 'Reasoning';
  } else {
    reasoning.hidden = true;
  }
  renderToolCalls(el.querySelector('.tools'), m.tool_calls || []);
  const body = el.querySelector('.content');
  if (m.role === 'assistant') renderMarkdown(body, m.content, final);
  else body.textContent = m.content;
  const err = el.querySelector('.msg-error');
  err.hidden = !m.error;
  err.textContent = m.error || '';
  el.querySelector('.stats').textContent = m.stopped ? `${fmtStats(m.stats)}${m.stats ? ' · ' : ''}stopped` : fmtStats(m.stats);
  el.classList.toggle('pending', !!m.pending);
}

function messageElement(m, index, conv) {
  const el = document.createElement('article');
  el.className = `msg ${m.role}`;
  el.setAttribute('aria-label', m.role === 'user' ? 'You' : 'Assistant');
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = m.role === 'user' ? 'You' : (state.model ? state.model.id : 'Assistant');
  const reasoning = document.createElement('details');
  reasoning.className = 'reasoning';
  reasoning.open = openReasoning.has(m); // stays as the reader left it across redraws
  reasoning.addEventListener('toggle', () => {
    if (reasoning.open) openReasoning.add(m);
    else openReasoning.delete(m);
  });
  const sum = document.createElement('summary');
  const rtext = document.createElement('div');
  rtext.className = 'reasoning-text';
  reasoning.append(sum, rtext);
  const tools = document.createElement('div');
  tools.className = 'tools';
  const body = document.createElement('div');
  body.className = 'content';
  const err = document.createElement('div');
  err.className = 'msg-error';
  err.setAttribute('role', 'alert');
  const foot = document.createElement('div');
  foot.className = 'foot';
  const stats = document.createElement('span');
  stats.className = 'stats';
  const actions = document.createElement('span');
  actions.className = 'actions';
  actions.appendChild(copyButton(() => m.content));
  const last = index === conv.messages.length - 1;
  if (m.role === 'assistant' && last && !m.pending) {
    actions.appendChild(smallButton('Regenerate', 'Regenerate this answer', () => regenerate()));
  }
  const lastUser = conv.messages.map((x) => x.role).lastIndexOf('user');
  if (m.role === 'user' && index === lastUser && !state.stream) {
    actions.appendChild(smallButton('Edit', 'Edit this message and send it again',
      () => editMessage(el, m, index)));
  }
  foot.append(stats, actions);
  el.append(who, reasoning, tools, body, err, foot);
  fillMessage(el, m, true);
  return el;
}

function renderMessages() {
  const box = $('messages');
  const conv = state.current;
  box.querySelectorAll('.msg').forEach((e) => e.remove());
  $('empty').hidden = !!(conv && conv.messages.length);
  if (!conv) return;
  conv.messages.forEach((m, i) => box.appendChild(messageElement(m, i, conv)));
  box.scrollTop = box.scrollHeight;
}

function editMessage(el, m, index) {
  const body = el.querySelector('.content');
  const ta = document.createElement('textarea');
  ta.value = m.content;
  ta.rows = Math.min(12, Math.max(2, m.content.split('\n').length));
  ta.setAttribute('aria-label', 'Edit your message');
  const save = smallButton('Save & send', 'Save the edit and send it again', () => {
    const text = ta.value.trim();
    if (!text) return;
    m.content = text;
    state.current.messages.length = index + 1; // the answers after it are dropped
    persist();
    renderMessages();
    generate(state.current);
  });
  const cancel = smallButton('Cancel', 'Cancel the edit', () => renderMessages());
  const wrap = document.createElement('div');
  wrap.className = 'edit';
  wrap.append(ta, save, cancel);
  body.replaceChildren(wrap);
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); save.click(); }
    if (e.key === 'Escape') { e.preventDefault(); cancel.click(); }
  });
  ta.focus();
}

// ---- generation ----

function requestBody(conv) {
  const s = state.settings;
  const messages = [];
  if (s.system.trim()) messages.push({ role: 'system', content: s.system });
  for (const m of conv.messages) {
    if (m.pending) continue;
    // an answer that was only reasoning or tool calls (the page runs no tools) adds nothing
    // the model could use: it is left out, as is its reasoning
    if (m.role === 'assistant' && !m.content) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const body = {
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: s.temperature,
    top_p: s.top_p,
    max_tokens: s.max_tokens,
  };
  if (state.model) body.model = state.model.id;
  if (s.seed !== null) body.seed = s.seed;
  return body;
}

function setStreaming(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  $('new-chat').disabled = on;
  document.body.classList.toggle('streaming', on);
}

// Wait ms, or until signal aborts (then throws its AbortError).
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(new DOMException('stopped', 'AbortError'));
    }, { once: true });
  });
}

function mergeToolCalls(into, deltas) {
  for (const d of deltas) {
    const i = Number.isInteger(d.index) ? d.index : into.length;
    const t = into[i] || (into[i] = { id: '', type: 'function', function: { name: '', arguments: '' } });
    if (d.id) t.id = d.id;
    if (d.function?.name) t.function.name += d.function.name;
    if (d.function?.arguments) t.function.arguments += d.function.arguments;
  }
}

function crashText(e) {
  const why = e.message.split(';')[0]; // kiln adds the worker's last log lines after a ';'
  return `The model's worker crashed while answering (${why}). kiln restarts it by ` +
    'itself; the answer above is cut short. Use Regenerate to try again.';
}

async function generate(conv) {
  if (state.stream) return;
  hideNotice();
  const msg = { role: 'assistant', content: '', reasoning: '', tool_calls: [], pending: true };
  conv.messages.push(msg);
  conv.updated = Date.now();
  const controller = new AbortController();
  state.stream = { controller, msg };
  renderMessages();
  const el = $('messages').lastElementChild;
  setStreaming(true);
  renderConversations();
  refreshHealth();

  let frame = 0;
  const paint = () => {
    frame = 0;
    fillMessage(el, msg, false);
    const box = $('messages');
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
  };
  const schedule = () => { if (!frame) frame = requestAnimationFrame(paint); };

  const body = requestBody(conv);
  let t0 = 0; let tFirst = null; let tLast = null; let chunks = 0; let usage = null;
  let finish = null;
  try {
    for (let attempt = 0; ; attempt++) {
      t0 = performance.now();
      try {
        for await (const chunk of streamChat(body, state.apiKey, controller.signal)) {
          if (chunk.usage) usage = chunk.usage;
          const c = chunk.choices && chunk.choices[0];
          if (!c) continue;
          const d = c.delta || {};
          let got = false;
          if (typeof d.content === 'string' && d.content) { msg.content += d.content; got = true; }
          if (typeof d.reasoning_content === 'string' && d.reasoning_content) {
            msg.reasoning += d.reasoning_content;
            got = true;
          }
          if (Array.isArray(d.tool_calls)) { mergeToolCalls(msg.tool_calls, d.tool_calls); got = true; }
          if (got) {
            chunks++;
            tLast = performance.now();
            if (tFirst === null) tFirst = tLast;
          }
          if (c.finish_reason) finish = c.finish_reason;
          schedule();
        }
        break;
      } catch (e) {
        if (!(e instanceof ApiError) || e.kind !== 'busy' || attempt >= BUSY_RETRIES || chunks) throw e;
        const wait = Math.min(Math.max(e.retryAfter, 1), 60);
        notify(`kiln is busy (HTTP ${e.status}: ${e.message}). Retrying in ${wait} s ` +
          `(try ${attempt + 2} of ${BUSY_RETRIES + 1}); Stop cancels.`, null, 'warn');
        await sleep(wait * 1000, controller.signal);
        hideNotice();
      }
    }
  } catch (e) {
    if (e && e.name === 'AbortError') {
      msg.stopped = true;
    } else if (e instanceof ApiError) {
      if (e.kind === 'crash') msg.error = crashText(e);
      else if (e.kind === 'busy') msg.error = `kiln is still busy after ${BUSY_RETRIES + 1} tries (HTTP ${e.status}: ${e.message}). Try again in a moment.`;
      else if (e.kind === 'auth') {
        msg.error = 'kiln refused the API key.';
        askKey('kiln refused the API key. Enter a valid one.');
      } else msg.error = e.message;
    } else {
      msg.error = `Something went wrong: ${e && e.message ? e.message : e}`;
    }
  } finally {
    if (frame) cancelAnimationFrame(frame);
    const tokens = usage && Number.isFinite(usage.completion_tokens) ? usage.completion_tokens : chunks;
    msg.stats = tFirst === null ? null : {
      ttft_ms: tFirst - t0,
      tokens,
      tokens_per_s: tokens > 1 && tLast > tFirst ? (tokens - 1) / ((tLast - tFirst) / 1000) : null,
      finish,
    };
    delete msg.pending;
    state.stream = null;
    setStreaming(false);
    refreshHealth();
    if (!conv.title) conv.title = (conv.messages.find((m) => m.role === 'user')?.content || '').slice(0, 48);
    persist();
    renderConversations();
    if (state.current === conv) renderMessages();
    $('input').focus();
  }
}

function sendMessage(text) {
  if (state.stream || !text.trim()) return;
  if (state.keyRequired && !state.apiKey) {
    askKey();
    return;
  }
  const conv = currentConversation();
  conv.messages.push({ role: 'user', content: text });
  if (!conv.title) conv.title = text.trim().split('\n')[0].slice(0, 48);
  persist();
  generate(conv);
}

function regenerate() {
  const conv = state.current;
  if (!conv || state.stream) return;
  const last = conv.messages[conv.messages.length - 1];
  if (last && last.role === 'assistant') conv.messages.pop();
  if (!conv.messages.length) return;
  generate(conv);
}

function stop() {
  if (state.stream) state.stream.controller.abort();
}

// ---- settings ----

function openSettings() {
  const s = state.settings;
  $('set-system').value = s.system;
  $('set-temperature').value = String(s.temperature);
  $('set-max-tokens').value = String(s.max_tokens);
  $('set-top-p').value = String(s.top_p);
  $('set-seed').value = s.seed === null ? '' : String(s.seed);
  if (state.model) $('set-max-tokens').max = String(state.model.context_length || '');
  $('settings-error').hidden = true;
  $('settings').showModal();
}

function saveSettingsFromForm(e) {
  e.preventDefault();
  const form = $('settings-form');
  if (!form.reportValidity()) return;
  const raw = {
    system: $('set-system').value,
    temperature: $('set-temperature').value,
    max_tokens: $('set-max-tokens').value,
    top_p: $('set-top-p').value,
    seed: $('set-seed').value,
  };
  state.settings = store.normalizeSettings(raw);
  const why = store.saveSettings(state.settings);
  if (why) {
    $('settings-error').textContent = why;
    $('settings-error').hidden = false;
    return;
  }
  $('settings').close();
}

// ---- API key, model, health ----

function askKey(why) {
  $('key-why').textContent = why || 'This server needs an API key. It is kept in this ' +
    'browser only and sent as a Bearer token.';
  $('key-input').value = '';
  if (!$('keydialog').open) $('keydialog').showModal();
  $('key-input').focus();
}

function onKeySubmit(e) {
  e.preventDefault();
  const k = $('key-input').value.trim();
  if (!k) return;
  state.apiKey = k;
  store.saveApiKey(k);
  $('keydialog').close();
  start();
}

async function loadModel() {
  try {
    const list = await getJSON('v1/models', state.apiKey);
    const m = list && Array.isArray(list.data) ? list.data[0] : null;
    if (!m) return;
    state.model = { id: m.id, context_length: m.context_length || null };
    $('model-name').textContent = m.id;
    $('model-ctx').textContent = m.context_length ? `context ${m.context_length.toLocaleString('en')} tokens` : '';
    document.title = `${m.id} · kiln chat`;
  } catch (e) {
    if (e instanceof ApiError && e.kind === 'auth') {
      state.started = false;
      askKey(state.apiKey ? 'kiln refused this API key. Enter a valid one.' : undefined);
      return;
    }
    $('model-name').textContent = 'model unknown';
    notify(`Could not read the model list: ${e.message}`);
  }
}

async function pollHealth() {
  const h = $('health');
  try {
    const res = await fetch('health', { cache: 'no-store' });
    const j = await res.json();
    const workers = Array.isArray(j.workers) ? j.workers : [];
    const ready = workers.filter((w) => w.state === 'ready').length;
    h.dataset.state = j.status === 'ok' ? 'ok' : j.status === 'degraded' ? 'warn' : 'bad';
    h.textContent = `${j.status} · ${ready}/${workers.length} worker${workers.length === 1 ? '' : 's'} ready · ${j.running ?? 0} running · ${j.waiting ?? 0} waiting`;
  } catch {
    h.dataset.state = 'bad';
    h.textContent = 'kiln is not answering';
  }
  clearTimeout(state.healthTimer);
  state.healthTimer = setTimeout(pollHealth, document.hidden ? HEALTH_EVERY_MS * 4 : HEALTH_EVERY_MS);
}

// Look now (an answer started or ended) rather than at the next tick.
function refreshHealth() {
  if (!state.started) return;
  clearTimeout(state.healthTimer);
  state.healthTimer = setTimeout(pollHealth, 150);
}

function start() {
  if (state.started) return;
  state.started = true;
  $('change-key').hidden = !state.keyRequired;
  loadModel();
  clearTimeout(state.healthTimer);
  pollHealth();
}

// ---- layout ----

function openSidebar() {
  document.body.classList.add('sidebar-open');
  $('open-sidebar').setAttribute('aria-expanded', 'true');
  $('new-chat').focus();
}

function closeSidebar() {
  if (!document.body.classList.contains('sidebar-open')) return;
  document.body.classList.remove('sidebar-open');
  $('open-sidebar').setAttribute('aria-expanded', 'false');
}

function autosize() {
  const ta = $('input');
  ta.style.height = 'auto';
  ta.style.height = `${Math.min(ta.scrollHeight, window.innerHeight * 0.4)}px`;
}

async function init() {
  const cur = store.loadCurrent();
  state.current = state.conversations.find((c) => c.id === cur) || null;
  document.body.classList.toggle('plain-text', !richText());
  renderConversations();
  renderMessages();

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('input').value;
    if (!text.trim() || state.stream) return;
    $('input').value = '';
    autosize();
    sendMessage(text);
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    } else if (e.key === 'Escape' && state.stream) {
      e.preventDefault();
      stop();
    }
  });
  $('input').addEventListener('input', autosize);
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', newChat);
  $('open-settings').addEventListener('click', openSettings);
  $('settings-form').addEventListener('submit', saveSettingsFromForm);
  $('settings-cancel').addEventListener('click', () => $('settings').close());
  $('settings-reset').addEventListener('click', () => {
    state.settings = { ...store.DEFAULT_SETTINGS };
    store.saveSettings(state.settings);
    openSettings();
  });
  $('key-form').addEventListener('submit', onKeySubmit);
  $('keydialog').addEventListener('cancel', (e) => {
    if (!state.apiKey) e.preventDefault(); // without a key the page cannot do anything
  });
  $('change-key').addEventListener('click', () => askKey('Enter the API key to use from now on.'));
  $('notice-close').addEventListener('click', hideNotice);
  $('open-sidebar').addEventListener('click', openSidebar);
  $('close-sidebar').addEventListener('click', closeSidebar);
  // on a phone the list is a drawer over the chat: a tap beside it puts it away
  $('main').addEventListener('click', (e) => {
    if (!$('open-sidebar').contains(e.target)) closeSidebar();
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && document.body.classList.contains('sidebar-open')) closeSidebar();
  });
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && state.started) {
      clearTimeout(state.healthTimer);
      pollHealth();
    }
  });

  // whether the API needs a key: the page asks for it before it calls anything
  try {
    const cfg = await getJSON('webui/config.json', '');
    state.keyRequired = !!cfg.api_key_required;
  } catch {
    state.keyRequired = false;
  }
  if (state.keyRequired && !state.apiKey) askKey();
  else start();
  $('input').focus();
}

init();
