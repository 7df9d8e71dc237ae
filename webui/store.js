// What the page keeps in this browser's localStorage: the settings, the conversations and the
// API key. Nothing here talks to the server.

const KEY_SETTINGS = 'kiln.settings.v1';
const KEY_CONVERSATIONS = 'kiln.conversations.v1';
const KEY_CURRENT = 'kiln.current.v1';
const KEY_API = 'kiln.apikey.v1';

export const DEFAULT_SETTINGS = Object.freeze({
  system: '',
  temperature: 0.7,
  max_tokens: 512,
  top_p: 1,
  seed: null,
});

function read(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback; // storage off, or a value some other page wrote
  }
}

// Returns '' or the reason it could not be kept (storage full or off).
function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return '';
  } catch (e) {
    return e && e.name === 'QuotaExceededError'
      ? 'This browser\'s storage is full: delete or export some conversations.'
      : 'This browser does not let the page keep data (private mode?): nothing is saved.';
  }
}

function num(v, min, max, fallback, integer) {
  const n = Number(v);
  if (v === null || v === '' || !Number.isFinite(n) || n < min || n > max) return fallback;
  return integer ? Math.trunc(n) : n;
}

// Settings with every field checked, so a stale or hand-edited value cannot reach a request.
export function normalizeSettings(s) {
  s = s && typeof s === 'object' ? s : {};
  return {
    system: typeof s.system === 'string' ? s.system : DEFAULT_SETTINGS.system,
    temperature: num(s.temperature, 0, 2, DEFAULT_SETTINGS.temperature, false),
    max_tokens: num(s.max_tokens, 1, 1e9, DEFAULT_SETTINGS.max_tokens, true),
    top_p: num(s.top_p, 0, 1, DEFAULT_SETTINGS.top_p, false),
    seed: s.seed === null || s.seed === '' || s.seed === undefined
      ? null : num(s.seed, -(2 ** 53), 2 ** 53, null, true),
  };
}

export const loadSettings = () => normalizeSettings(read(KEY_SETTINGS, {}));
export const saveSettings = (s) => write(KEY_SETTINGS, normalizeSettings(s));

export function loadConversations() {
  const list = read(KEY_CONVERSATIONS, []);
  if (!Array.isArray(list)) return [];
  return list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages));
}

export const saveConversations = (list) => write(KEY_CONVERSATIONS, list);
export const loadCurrent = () => read(KEY_CURRENT, null);
export const saveCurrent = (id) => write(KEY_CURRENT, id);

export const loadApiKey = () => {
  const k = read(KEY_API, '');
  return typeof k === 'string' ? k : '';
};
export const saveApiKey = (k) => write(KEY_API, k);

export function newConversation() {
  const now = Date.now();
  const rnd = Math.random().toString(36).slice(2, 8);
  return { id: `c${now.toString(36)}${rnd}`, title: '', created: now, updated: now, messages: [] };
}
