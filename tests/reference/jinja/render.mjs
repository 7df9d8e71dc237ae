// Renders every template of ../shared/templates with every conversation of
// tests/fixtures/jinja/conversations.json through @huggingface/jinja (the oracle), with
// add_generation_prompt on and off, and writes tests/fixtures/jinja/<template>.json:
// {"parse_error": msg} or {"<conversation>/<gen|nogen>": text | {"raises": msg}}, and
// raises.txt, the list of renders that raise.
// Run: cd tests/reference/jinja && npm ci && node render.mjs [shared dir]
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

process.env.TZ = "UTC";
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const shared = process.argv[2] ?? process.env.KILN_SHARED ?? path.resolve(root, "../shared");
const fixtures = path.join(root, "tests/fixtures/jinja");
const spec = JSON.parse(fs.readFileSync(path.join(fixtures, "conversations.json"), "utf8"));

// strftime_now reads new Date(): fix the clock so both engines print the same date
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { if (a.length === 0) super(spec.now * 1000); else super(...a); }
  static now() { return spec.now * 1000; }
};

const dir = path.join(shared, "templates");
const raises = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".jinja")).sort()) {
  const src = fs.readFileSync(path.join(dir, file), "utf8");
  const out = {};
  let tmpl;
  try {
    tmpl = new Template(src);
  } catch (e) {
    out.parse_error = String(e.message ?? e);
  }
  if (tmpl) {
    for (const [name, c] of Object.entries(spec.conversations)) {
      for (const gen of [true, false]) {
        const ctx = { messages: c.messages, bos_token: spec.bos_token, eos_token: spec.eos_token,
                      add_generation_prompt: gen };
        if (c.tools) ctx.tools = spec.tools;
        Object.assign(ctx, c.kwargs ?? {});
        const key = `${name}/${gen ? "gen" : "nogen"}`;
        try {
          out[key] = tmpl.render(structuredClone(ctx));
        } catch (e) {
          out[key] = { raises: String(e.message ?? e) };
          raises.push(`${file} ${key}: ${out[key].raises}`);
        }
      }
    }
  }
  fs.writeFileSync(path.join(fixtures, file.replace(/\.jinja$/, ".json")), JSON.stringify(out, null, 1) + "\n");
}
// the pairs neither engine renders (kiln must raise too), listed rather than hidden
fs.writeFileSync(path.join(fixtures, "raises.txt"),
  "# template conversation/gen: the reference's error (kiln raises on each as well)\n" +
  raises.join("\n") + "\n");
console.log(`${raises.length} renders raise`);
console.log(`wrote ${fs.readdirSync(fixtures).length - 1} fixtures to ${fixtures}`);
