// deploy/nginx.conf and deploy/haproxy.cfg in front of two real kiln instances on loopback:
// a steady load; kill -9 of one kiln front (requests that had not started go to the other
// instance); the first restarted, then SIGTERM of the second (its running requests finish,
// new ones go to the first). No request may hang; the counts are printed. Skipped with a
// message when nginx or haproxy is not installed (make deps-test installs both).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const binDir = process.env.KILN_BIN_DIR || path.join(root, "build");
const CLIENTS = 6;
const HANG_MS = 15000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const have = (cmd) => {
  for (const d of ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]) {
    try { execFileSync("test", ["-x", `${d}/${cmd}`]); return `${d}/${cmd}`; } catch { /* next */ }
  }
  return null;
};

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

// Start kiln on port (0: any) and resolve { proc, port } once it listens.
function startKiln(port) {
  return new Promise((resolve, reject) => {
    const proc = spawn(path.join(binDir, "kiln"),
      ["--model", "mock", "--host", "127.0.0.1", "--port", String(port), "--workers", "1",
       "--mock-delay-ms", "15", "--drain-ms", "5000"],
      { detached: true, stdio: ["ignore", "ignore", "pipe"] });
    let out = "";
    const timer = setTimeout(() => reject(new Error(`kiln did not start:\n${out}`)), 20000);
    proc.stderr.on("data", (b) => {
      out += b;
      const m = out.match(/listening on 127\.0\.0\.1:(\d+)/);
      if (m && !proc.port) { proc.port = Number(m[1]); clearTimeout(timer); resolve(proc); }
    });
    proc.on("exit", () => { clearTimeout(timer); if (!proc.port) reject(new Error(`kiln exited:\n${out}`)); });
  });
}

async function waitOk(url, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { const r = await fetch(url, { signal: AbortSignal.timeout(1000) }); if (r.status === 200) return; } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error(`${url} never answered 200`);
}

function waitExit(proc, ms) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    proc.on("exit", () => { clearTimeout(t); resolve(true); });
  });
}

function killGroup(proc) {
  try { process.kill(-proc.pid, "SIGKILL"); } catch { /* gone */ }
}

// The deploy file with our ports: the upstream's servers replaced by the two kiln ports.
function nginxConf(dir, front, a, b) {
  let c = readFileSync(path.join(root, "deploy/nginx.conf"), "utf8");
  c = c.replace(/^pid .*$/m, `pid ${dir}/nginx.pid;`)
    .replace(/^error_log .*$/m, `error_log ${dir}/error.log warn;`)
    .replace(/access_log .*;/, `access_log ${dir}/access.log;`)
    .replace(/listen 8080;/, `listen 127.0.0.1:${front};`);
  let i = 0;
  c = c.replace(/server 127\.0\.0\.1:\d+ (max_fails[^;]*);\n/g, (m, rest) =>
    (++i <= 2 ? `server 127.0.0.1:${i === 1 ? a : b} ${rest};\n` : ""));
  assert.equal(i, 3);
  return c + "\n";
}

function haproxyConf(front, a, b) {
  let c = readFileSync(path.join(root, "deploy/haproxy.cfg"), "utf8");
  c = c.replace(/bind 127\.0\.0\.1:8080/, `bind 127.0.0.1:${front}`)
    .replace(/^\s*log stdout.*$/m, "")
    .replace(/server kiln1 127\.0\.0\.1:\d+/, `server kiln1 127.0.0.1:${a}`)
    .replace(/server kiln2 127\.0\.0\.1:\d+/, `server kiln2 127.0.0.1:${b}`)
    .replace(/^\s*server kiln3 .*$/m, "");
  return c;
}

// CLIENTS loops of completions until stop(); each request: start, end, status.
function load(front) {
  const reqs = [];
  let running = true;
  const body = JSON.stringify({ prompt: "Once upon a time", max_tokens: 8 });
  const loops = Array.from({ length: CLIENTS }, async (_, k) => {
    while (running) {
      const r = { start: Date.now(), end: 0, status: 0, hung: false, client: k };
      reqs.push(r);
      try {
        const res = await fetch(`http://127.0.0.1:${front}/v1/completions`, {
          method: "POST", headers: { "Content-Type": "application/json" }, body,
          signal: AbortSignal.timeout(HANG_MS) });
        const j = await res.json().catch(() => null);
        r.status = res.status;
        r.ok = res.status === 200 && j && j.choices && j.choices[0].text.length > 0;
      } catch (e) {
        r.hung = e.name === "TimeoutError";
        r.error = String(e);
      }
      r.end = Date.now();
      if (!r.ok) await sleep(20);
    }
  });
  return { reqs, stop: async () => { running = false; await Promise.all(loops); } };
}

async function scenario(t, name, startBalancer) {
  const dir = mkdtempSync(path.join(tmpdir(), `kiln-${name}-`));
  let a = await startKiln(0);
  const b = await startKiln(0);
  const portA = a.port, portB = b.port;
  const front = await freePort();
  const bal = startBalancer(dir, front, portA, portB);
  const procs = [a, b, bal];
  try {
    await waitOk(`http://127.0.0.1:${portA}/health`);
    await waitOk(`http://127.0.0.1:${portB}/health`);
    await waitOk(`http://127.0.0.1:${front}/health`);
    const L = load(front);
    await sleep(800);
    // 1. kill -9 one kiln front (its worker follows through PDEATHSIG)
    // A request sent between the kill and the process's end may still reach the dying
    // front: it counts as running there, and "after the kill" begins once its exit is seen.
    const tKill = Date.now();
    process.kill(a.pid, "SIGKILL");
    assert.ok(await waitExit(a, 5000), "the killed front did not exit");
    const tDead = Date.now();
    await sleep(800);
    // 2. restart it on its port, wait until it serves, then SIGTERM the other
    a = await startKiln(portA);
    procs.push(a);
    await waitOk(`http://127.0.0.1:${portA}/health`);
    // the balancer takes it back: haproxy after 2 checks 1 s apart, nginx once the
    // fail_timeout of its passive health check ran out since its last failure
    const failTimeout = Number((readFileSync(path.join(root, "deploy/nginx.conf"), "utf8")
      .match(/fail_timeout=(\d+)s/) || [0, 3])[1]);
    await sleep(name === "nginx" ? failTimeout * 1000 + 1000 : 2500);
    const tTerm = Date.now();
    process.kill(b.pid, "SIGTERM");
    const bExited = await waitExit(b, 10000);
    await sleep(800);
    await L.stop();
    const tEnd = Date.now();

    const r = L.reqs;
    const inFlightAtKill = r.filter((x) => x.start < tDead && x.end >= tKill);
    const afterKill = r.filter((x) => x.start >= tDead);
    const count = (xs) => ({ total: xs.length, ok: xs.filter((x) => x.ok).length,
      failed: xs.filter((x) => !x.ok && !x.hung).length, hung: xs.filter((x) => x.hung).length });
    const report = {
      balancer: name,
      all: count(r),
      before_kill: count(r.filter((x) => x.end < tKill)),
      in_flight_at_kill: count(inFlightAtKill),
      after_kill: count(afterKill),
      around_sigterm: count(r.filter((x) => x.start < tTerm + 1000 && x.end >= tTerm)),
      seconds: ((tEnd - tKill) / 1000).toFixed(1),
    };
    console.log(`${name}: ${JSON.stringify(report)}`);
    t.diagnostic(JSON.stringify(report));
    assert.equal(report.all.hung, 0, "a request hung");
    assert.ok(bExited, "the SIGTERMed instance did not exit within its drain");
    // every request that began after the kill was served (by the other instance, or by the
    // restarted one); both balancers re-run elsewhere a non-streamed request that was running
    // on the killed front (nothing had reached its client), so none of those fails either
    const bad = afterKill.filter((x) => !x.ok);
    if (bad.length) console.log(`${name}: failed after the kill: ${JSON.stringify(bad.slice(0, 5).map((x) => ({ ...x, start: x.start - tTerm, end: x.end - tTerm })))}`);
    assert.equal(bad.length, 0, `requests begun after the kill failed: ${JSON.stringify(bad.slice(0, 3))}`);
    assert.equal(report.in_flight_at_kill.failed, 0, "a request running on the killed front was not re-run");
    assert.ok(report.after_kill.ok > CLIENTS * 3, "too few requests went through");
  } finally {
    for (const p of procs) killGroup(p);
    try { process.kill(bal.pid, "SIGKILL"); } catch { /* gone */ }
    if (!process.env.KILN_KEEP_TMP) rmSync(dir, { recursive: true, force: true });
  }
}

const nginx = have("nginx");
const haproxy = have("haproxy");

test("nginx in front of two kiln instances: kill -9 one, restart it, SIGTERM the other",
  { skip: nginx ? false : "nginx is not installed (apt-get install nginx)" }, async (t) => {
    await scenario(t, "nginx", (dir, front, a, b) => {
      writeFileSync(path.join(dir, "nginx.conf"), nginxConf(dir, front, a, b));
      return spawn(nginx, ["-c", path.join(dir, "nginx.conf"), "-p", dir, "-g", "daemon off;"],
        { detached: true, stdio: "ignore" });
    });
  });

test("haproxy in front of two kiln instances: kill -9 one, restart it, SIGTERM the other",
  { skip: haproxy ? false : "haproxy is not installed (apt-get install haproxy)" }, async (t) => {
    await scenario(t, "haproxy", (dir, front, a, b) => {
      writeFileSync(path.join(dir, "haproxy.cfg"), haproxyConf(front, a, b));
      return spawn(haproxy, ["-db", "-f", path.join(dir, "haproxy.cfg")],
        { detached: true, stdio: "ignore" });
    });
  });
