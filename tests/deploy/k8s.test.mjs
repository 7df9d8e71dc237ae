// deploy/k8s/*.yaml against the Kubernetes API schemas (kubernetes-models, offline), plus
// what the manifests must agree on with kiln: probes, grace period vs --drain-ms, the HPA's
// metric, selectors. Run: cd tests/deploy && npm ci && node --test
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { parseAllDocuments } from "yaml";
import { ConfigMap, PersistentVolumeClaim, Service } from "kubernetes-models/v1";
import { Deployment } from "kubernetes-models/apps/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const dir = path.join(root, "deploy/k8s");
const models = {
  "v1/ConfigMap": ConfigMap,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "v1/Service": Service,
  "apps/v1/Deployment": Deployment,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "autoscaling/v2/HorizontalPodAutoscaler": HorizontalPodAutoscaler,
};

const objects = [];
for (const f of readdirSync(dir).filter((n) => n.endsWith(".yaml")).sort()) {
  for (const doc of parseAllDocuments(readFileSync(path.join(dir, f), "utf8"))) {
    assert.equal(doc.errors.length, 0, `${f}: ${doc.errors.join("; ")}`);
    const o = doc.toJS();
    if (o) objects.push({ file: f, o });
  }
}
const byKind = (k) => objects.filter((x) => x.o.kind === k).map((x) => x.o);

test("every manifest validates against its Kubernetes API schema", () => {
  assert.ok(objects.length >= 6);
  for (const { file, o } of objects) {
    const M = models[`${o.apiVersion}/${o.kind}`];
    assert.ok(M, `${file}: no schema known for ${o.apiVersion} ${o.kind}`);
    assert.doesNotThrow(() => new M(o).validate(), `${file}: ${o.kind} is not valid`);
  }
});

test("a broken manifest is caught by the schema (the validator is not a no-op)", () => {
  const d = structuredClone(byKind("Deployment")[0]);
  d.spec.template.spec.containers[0].ports[0].containerPort = "eighty";
  assert.throws(() => new Deployment(d).validate());
  const h = structuredClone(byKind("HorizontalPodAutoscaler")[0]);
  h.spec.metrics[0].pods.target.type = 42;
  assert.throws(() => new HorizontalPodAutoscaler(h).validate());
});

const conf = byKind("ConfigMap")[0].data["kiln.conf"];
const confValue = (k) => {
  const m = conf.match(new RegExp(`^\\s*${k}\\s*=\\s*(\\S+)`, "m"));
  return m ? m[1] : undefined;
};

test("the grace period covers the preStop sleep, --drain-ms and the workers' exit", () => {
  const d = byKind("Deployment")[0];
  const pod = d.spec.template.spec;
  const c = pod.containers[0];
  const drainMs = Number(confValue("drain-ms"));
  assert.ok(drainMs > 0);
  const preStopS = c.lifecycle.preStop.sleep.seconds;
  assert.ok(pod.terminationGracePeriodSeconds * 1000 > preStopS * 1000 + drainMs + 3000,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} s is not above ` +
    `preStop ${preStopS} s + drain-ms ${drainMs} + 3 s`);
});

test("readiness on /health, liveness on a cheap route that does not need a worker", () => {
  const c = byKind("Deployment")[0].spec.template.spec.containers[0];
  assert.equal(c.readinessProbe.httpGet.path, "/health");
  assert.notEqual(c.livenessProbe.httpGet.path, "/health");
  assert.equal(c.livenessProbe.httpGet.path, "/v1/models");
  assert.ok(c.args.includes("--config"));
  assert.equal(confValue("host"), "0.0.0.0");
  assert.equal(Number(confValue("port")), c.ports[0].containerPort);
  assert.ok(c.resources.requests.memory && c.resources.limits.memory);
  assert.ok(c.volumeMounts.some((v) => v.name === "model" && confValue("model").startsWith(v.mountPath)));
});

test("the Service, PDB and HPA select and target the Deployment's pods", () => {
  const d = byKind("Deployment")[0];
  const labels = d.spec.template.metadata.labels;
  const matches = (sel) => Object.entries(sel).every(([k, v]) => labels[k] === v);
  assert.ok(matches(byKind("Service")[0].spec.selector));
  assert.ok(matches(byKind("PodDisruptionBudget")[0].spec.selector.matchLabels));
  const hpa = byKind("HorizontalPodAutoscaler")[0];
  assert.equal(hpa.spec.scaleTargetRef.kind, "Deployment");
  assert.equal(hpa.spec.scaleTargetRef.name, d.metadata.name);
});

test("the HPA scales on a metric kiln exports", () => {
  const hpa = byKind("HorizontalPodAutoscaler")[0];
  const name = hpa.spec.metrics[0].pods.metric.name;
  const metricsC = readFileSync(path.join(root, "server/metrics.c"), "utf8");
  assert.ok(metricsC.includes(`"${name}"`), `kiln exports no metric ${name}`);
});
