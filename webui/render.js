// Turning a model's answer into page content. Model output is untrusted: markdown goes
// through marked, then DOMPurify (no script, no event handler, no style, no form), links get
// target=_blank and rel=noopener noreferrer, code blocks are highlighted by highlight.js and
// get a copy button. Raw HTML in the markdown is shown as text. Without those libraries (a build without npm) answers stay plain text.

const hasLibs = () => typeof window.marked === 'object' && typeof window.DOMPurify === 'function';

let configured = false;
function configure() {
  if (configured) return;
  configured = true;
  // class survives only as a code block's language (marked's class="language-x")
  window.DOMPurify.addHook('uponSanitizeAttribute', (node, data) => {
    if (data.attrName === 'class' &&
        !(node.tagName === 'CODE' && /^language-[\w+#.-]{1,32}$/.test(data.attrValue))) {
      data.keepAttr = false;
    }
  });
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
  });
  if (window.hljs) window.hljs.configure({ ignoreUnescapedHTML: true });
  // raw HTML in an answer is shown as the text it is, never parsed: a chat answer has no
  // business adding elements, and DOMPurify below stays the second line
  window.marked.use({ renderer: { html: (token) => escapeHTML(token.text) } });
}

function escapeHTML(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

export const richText = () => hasLibs();

// Copy text to the clipboard; resolves true when it worked.
export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch { /* fall through to the old way */ }
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.className = 'offscreen';
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch { ok = false; }
  ta.remove();
  return ok;
}

// A small button that copies what get() returns and says so for a moment.
export function copyButton(get, label = 'Copy') {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'copy';
  b.textContent = label;
  b.setAttribute('aria-label', label === 'Copy' ? 'Copy this message' : label);
  b.addEventListener('click', async () => {
    const ok = await copyText(get());
    b.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

// Fill el with text rendered as markdown (or as plain text). final: the answer is complete
// (code blocks are highlighted only then: partial code highlights badly and costs time).
export function renderMarkdown(el, text, final = true) {
  if (!hasLibs()) {
    el.classList.add('plain');
    el.textContent = text;
    return;
  }
  configure();
  const html = window.marked.parse(text, { gfm: true, breaks: false, async: false });
  el.innerHTML = window.DOMPurify.sanitize(html, {
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option',
      'iframe', 'frame', 'object', 'embed', 'link', 'meta', 'base', 'svg', 'math'],
    FORBID_ATTR: ['style', 'id', 'name', 'srcset', 'formaction'],
    ALLOW_DATA_ATTR: false,
    // links: http(s), mailto and scheme-less values (DOMPurify's default, fewer schemes;
    // it also tests plain attribute values such as align="right" against this)
    ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
  });
  el.querySelectorAll('pre > code').forEach((code) => {
    const pre = code.parentElement;
    const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
    const lang = m ? m[1] : '';
    if (lang && !(window.hljs && window.hljs.getLanguage(lang))) code.classList.remove(`language-${lang}`);
    if (final && window.hljs) window.hljs.highlightElement(code);
    const bar = document.createElement('div');
    bar.className = 'code-bar';
    const name = document.createElement('span');
    name.textContent = lang || 'code';
    bar.append(name, copyButton(() => code.textContent, 'Copy code'));
    pre.before(bar);
  });
}
