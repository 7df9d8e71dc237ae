// Helpers for the chat page's browser tests: start kiln (--port 0, the port read from its
// stderr, ready when /health says 200), launch Debian's Chromium through playwright-core with
// a fresh profile, and bounded polling. Every wait has a deadline.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const BIN = process.env.KILN_BIN_DIR || path.resolve('../../build');
export const SHARED = process.env.KILN_SHARED || path.resolve('../../../shared');
export const ARTIFACTS = process.env.KILN_WEBUI_ARTIFACTS || path.resolve(BIN, 'webui-test');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// Poll fn() every 50 ms until it returns a truthy value or ms pass; returns that value or
// throws with what.
export async function until(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startKiln(args) {
  const proc = spawn(`${BIN}/kiln`, ['--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kiln did not start: ${log}`)), 20000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (c) => { clearTimeout(timer); reject(new Error(`kiln exited ${c}: ${log}`)); });
  });
  const url = `http://127.0.0.1:${port}/`;
  await until(async () => (await fetch(`${url}health`)).status === 200, 20000, 'a ready worker');
  return {
    proc,
    port,
    url,
    log: () => log,
    health: async () => (await fetch(`${url}health`)).json(),
    stop: async () => {
      if (proc.exitCode !== null) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
      await gone;
      clearTimeout(t);
    },
  };
}

// One browser for the whole file, on a fresh profile that is removed afterwards.
export async function launchBrowser() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-webui-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1200, height: 800 },
    acceptDownloads: true,
    timeout: 60000,
  });
  context.setDefaultTimeout(15000);
  return {
    context,
    close: async () => {
      await context.close().catch(() => {});
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

// A page that records what would show a broken page: CSP violations and other console
// errors, uncaught exceptions, JavaScript dialogs (an executed alert()) and requests to any
// origin other than kiln's.
export async function openPage(context, kiln) {
  const page = await context.newPage();
  const seen = { errors: [], dialogs: [], foreign: [], requests: [] };
  page.on('console', (m) => { if (m.type() === 'error') seen.errors.push(m.text()); });
  page.on('pageerror', (e) => seen.errors.push(String(e)));
  page.on('dialog', (d) => { seen.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  page.on('request', (r) => {
    seen.requests.push({ url: r.url(), method: r.method(), headers: r.headers(), body: r.postData() });
    if (!r.url().startsWith(kiln.url) && !r.url().startsWith('blob:') && !r.url().startsWith('data:')) {
      seen.foreign.push(r.url());
    }
  });
  await page.goto(kiln.url);
  return { page, seen };
}

export function shot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  return page.screenshot({ path: path.join(ARTIFACTS, name) });
}
