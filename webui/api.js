// The calls the page makes to kiln's OpenAI-compatible API: JSON GETs and the streamed chat
// completion, read as Server-Sent Events. Errors come out as ApiError with a kind the page
// words for a person: 'auth' (401), 'busy' (503/429, with the Retry-After seconds), 'crash'
// (the worker died), 'server' (any other error answer or error event), 'cut' (the stream
// ended without [DONE]), 'network' (no answer at all).

export class ApiError extends Error {
  constructor(kind, message, extra = {}) {
    super(message);
    this.name = 'ApiError';
    this.kind = kind;
    this.status = extra.status ?? 0;
    this.code = extra.code ?? null;
    this.retryAfter = extra.retryAfter ?? 0;
  }
}

function headers(key, json) {
  const h = {};
  if (key) h.Authorization = `Bearer ${key}`;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

// An error answer (status >= 400) as an ApiError.
async function errorOf(res) {
  let message = `HTTP ${res.status}`;
  let code = null;
  try {
    const j = await res.json();
    if (j && j.error) {
      message = j.error.message || message;
      code = j.error.code || null;
    }
  } catch { /* not JSON */ }
  const retry = Number.parseInt(res.headers.get('Retry-After') || '', 10);
  const extra = { status: res.status, code, retryAfter: Number.isFinite(retry) ? retry : 1 };
  if (res.status === 401) return new ApiError('auth', message, extra);
  if (res.status === 503 || res.status === 429) return new ApiError('busy', message, extra);
  if (code === 'worker_crashed') return new ApiError('crash', message, extra);
  return new ApiError('server', message, extra);
}

async function call(path, init) {
  try {
    return await fetch(path, init);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError('network', 'kiln did not answer: is it still running?');
  }
}

export async function getJSON(path, key, signal) {
  const res = await call(path, { headers: headers(key, false), signal, cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// One SSE event's data lines joined, or null for an event without data.
function eventData(block) {
  const lines = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith('data:')) lines.push(line.slice(line[5] === ' ' ? 6 : 5));
  }
  return lines.length ? lines.join('\n') : null;
}

// POST body to /v1/chat/completions with stream on; yields each chunk object. Throws ApiError,
// or the AbortError of signal when the caller stopped it.
export async function* streamChat(body, key, signal) {
  const res = await call('v1/chat/completions', {
    method: 'POST',
    headers: headers(key, true),
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      let r;
      try {
        r = await reader.read();
      } catch (e) {
        if (e && e.name === 'AbortError') throw e;
        throw new ApiError('cut', 'The connection to kiln broke during the answer.');
      }
      if (r.done) break;
      buf += decoder.decode(r.value, { stream: true });
      let at;
      while ((at = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, at);
        buf = buf.slice(at + (buf[at] === '\r' ? 4 : 2));
        const data = eventData(block);
        if (data === null) continue;
        if (data === '[DONE]') return;
        let obj;
        try {
          obj = JSON.parse(data);
        } catch {
          throw new ApiError('server', 'kiln sent a stream event that is not JSON.');
        }
        if (obj && obj.error) {
          const code = obj.error.code || null;
          throw new ApiError(code === 'worker_crashed' ? 'crash' : 'server',
            obj.error.message || 'The server ended the answer with an error.', { code });
        }
        yield obj;
      }
    }
  } finally {
    reader.releaseLock();
  }
  throw new ApiError('cut', 'The answer ended before it was complete (the connection closed).');
}
