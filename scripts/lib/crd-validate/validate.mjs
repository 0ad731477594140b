// Validates prometheus-operator objects (ServiceMonitor, PodMonitor, PrometheusRule) against
// the CRD OpenAPI schemas that @kubernetes-models/prometheus-operator compiles (ajv).
// Input: a JSON file holding an array of objects (scripts/lib/checks.py writes it).
// CRD schemas do not forbid unknown fields (the API server prunes them), so checks.py also
// rejects fields this chart never meant to write.
import { readFileSync } from "node:fs";
import { PodMonitor, PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const kinds = { PodMonitor, PrometheusRule, ServiceMonitor };
const docs = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const doc of docs) {
  const name = `${doc.kind}/${doc.metadata?.name}`;
  const Kind = kinds[doc.kind];
  if (!Kind) {
    console.log(`FAIL ${name}: no schema for kind ${doc.kind}`);
    failed++;
    continue;
  }
  try {
    new Kind(doc).validate();
    console.log(`ok   ${name} (monitoring.coreos.com/v1 schema)`);
  } catch (error) {
    console.log(`FAIL ${name}: ${error.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
