// Offline schema validation of Kubernetes objects, for `strata render --launcher kubernetes`
// (docs/deploy.md): no API server is needed or contacted.
//   node scripts/k8s-validate/validate.mjs FILE.yaml...   ("-" for standard input)
// Each document is checked twice:
//  - kubernetes-models: the API's OpenAPI types, formats and required fields;
//  - @kubernetes/client-node's model classes: every field must be one the API type declares
//    (their attribute maps), so a misspelt or misplaced key is refused, as `kubectl apply
//    --validate=strict` would refuse it.
// Custom resources of the Prometheus operator (monitoring.coreos.com/v1, `strata render
// --service-monitor`) are checked by @kubernetes-models/prometheus-operator alone: the operator's
// CRD types, formats and required fields. Its schemas are open, so an unknown field there is not
// refused; tests/unit/orchestrator/render_test.cc checks the ServiceMonitor's structure instead.
// Prints one line per problem and exits 1 if there is any; 0 and a count otherwise.
// Dependencies: `npm install --prefix scripts/k8s-validate` (scripts/install-deps.sh does it).
import { readFileSync } from "node:fs";
import * as k8s from "@kubernetes/client-node";
import yaml from "js-yaml";

const PRIMITIVES = new Set(["string", "number", "boolean", "Date", "object", "any", "IntOrString"]);

// "Array<V1Container>" -> {array: "V1Container"}; "{ [key: string]: string; }" -> {map: "string"}.
function parseType(type) {
  const array = /^Array<(.+)>$/.exec(type);
  if (array) return { array: array[1] };
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) return { map: map[1] };
  return { name: type };
}

function typeOfValue(v) {
  if (Array.isArray(v)) return "array";
  return v === null ? "null" : typeof v;
}

// Refuses keys that `type` does not declare, recursively.
function checkFields(value, type, path, problems) {
  const t = parseType(type);
  if (t.array) {
    if (!Array.isArray(value)) return problems.push(`${path}: expected a list, got ${typeOfValue(value)}`);
    value.forEach((item, i) => checkFields(item, t.array, `${path}[${i}]`, problems));
    return;
  }
  if (t.map) {
    if (typeOfValue(value) !== "object") return problems.push(`${path}: expected a map, got ${typeOfValue(value)}`);
    for (const [k, v] of Object.entries(value)) checkFields(v, t.map, `${path}.${k}`, problems);
    return;
  }
  if (PRIMITIVES.has(t.name)) return;
  const model = k8s[t.name];
  if (!model || typeof model.getAttributeTypeMap !== "function") return; // an enum or a scalar
  if (typeOfValue(value) !== "object") return problems.push(`${path}: expected an object (${t.name}), got ${typeOfValue(value)}`);
  const attributes = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!attributes.has(k)) {
      problems.push(`${path}.${k}: unknown field (not in ${t.name})`);
      continue;
    }
    checkFields(v, attributes.get(k), `${path}.${k}`, problems);
  }
}

// The custom resources' API groups and the package that models them.
const CUSTOM_RESOURCES = new Map([["monitoring.coreos.com", "@kubernetes-models/prometheus-operator"]]);

function customResourcePackage(apiVersion) {
  return CUSTOM_RESOURCES.get(apiVersion.split("/")[0]);
}

// kubernetes-models by apiVersion: "v1" -> kubernetes-models/v1, "apps/v1" -> .../apps/v1.
async function modelsFor(apiVersion) {
  try {
    const custom = customResourcePackage(apiVersion);
    if (custom) return await import(`${custom}/${apiVersion}`);
    return await import(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
}

async function main() {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: validate.mjs FILE.yaml... (- for standard input)");
    process.exit(2);
  }
  const problems = [];
  let count = 0;
  for (const file of files) {
    const text = readFileSync(file === "-" ? 0 : file, "utf8");
    // Plain YAML: client-node's own loader maps documents onto its classes and drops unknown keys.
    const docs = yaml.loadAll(text).filter((d) => d !== null && d !== undefined);
    count += docs.length;
    for (const doc of docs) await checkDocument(doc, files.length > 1 ? `${file}: ` : "", problems);
  }
  for (const p of problems) console.log(p);
  if (problems.length > 0) {
    console.log(`${problems.length} problem(s) in ${count} object(s)`);
    process.exit(1);
  }
  console.log(`${count} object(s) valid`);
}

async function checkDocument(doc, prefix, problems) {
  const where = `${prefix}${doc.kind ?? "?"}/${doc.metadata?.name ?? "?"}`;
  if (!doc.apiVersion || !doc.kind) {
    problems.push(`${where}: apiVersion and kind are required`);
    return;
  }
  const version = doc.apiVersion.split("/").pop();
  const clientClass = `${version[0].toUpperCase()}${version.slice(1)}${doc.kind}`;
  if (customResourcePackage(doc.apiVersion)) {
    // client-node has no class for a custom resource; its package below checks it.
  } else if (!k8s[clientClass]) {
    problems.push(`${where}: no model ${clientClass} for ${doc.apiVersion} ${doc.kind}`);
  } else {
    checkFields(doc, clientClass, where, problems);
  }
  const models = await modelsFor(doc.apiVersion);
  const Model = models?.[doc.kind];
  if (!Model) {
    problems.push(`${where}: kubernetes-models has no ${doc.apiVersion} ${doc.kind}`);
    return;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    problems.push(`${where}: ${e.message.replace(/\s+/g, " ")}`);
  }
}

await main();
