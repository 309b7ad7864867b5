// Checks the custom resources among Kubernetes manifests against their
// schemas: KEDA's (ScaledObject, TriggerAuthentication) and
// prometheus-operator's (ServiceMonitor), from the kubernetes-models
// packages. Built-in kinds are checked by kubernetes-validate instead; this
// skips them. Usage: node validate.mjs FILE.yaml... (exits 1 on a bad one).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as keda from "@kubernetes-models/keda/keda.sh/v1alpha1";
import * as monitoring from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const groups = { "keda.sh/v1alpha1": keda, "monitoring.coreos.com/v1": monitoring };
const builtIn = (apiVersion) => !apiVersion.includes(".") || apiVersion.includes(".k8s.io/");

let bad = 0;
let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const obj = doc.toJS();
    if (obj === null) continue;
    if (typeof obj !== "object" || Array.isArray(obj)) {
      console.error(`${file}: a document that is not an object: ${JSON.stringify(obj).slice(0, 80)}`);
      bad++;
      continue;
    }
    const where = `${file}: ${obj.kind} ${obj.metadata?.name}`;
    if (builtIn(obj.apiVersion ?? "")) continue;
    const Kind = groups[obj.apiVersion]?.[obj.kind];
    if (!Kind) {
      console.error(`${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
      bad++;
      continue;
    }
    try {
      new Kind(obj).validate();
      checked++;
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      bad++;
    }
  }
}
console.log(`validate.mjs: ${checked} custom resources valid, ${bad} not`);
process.exit(bad ? 1 : 0);
