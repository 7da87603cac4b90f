#!/usr/bin/env python3
"""Turn a kube-apiserver's OpenAPI v2 document (stdin) into one standalone
JSON schema per kind, named the way kubeconform looks them up with
-schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json':
deployment-apps-v1.json, service-v1.json, bucketscan-bucketscan-v1alpha1.json.

The schemas come from the very API server the tests run (CRDs it serves
included), since no schema registry can be reached here. Strict: objects
reject unknown fields, as `kubeconform -strict` expects.

Usage: kubectl get --raw /openapi/v2 | openapi-to-jsonschema.py OUT_DIR
"""
import json
import os
import sys

swagger = json.load(sys.stdin)
definitions = swagger["definitions"]
out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)


def resolve(schema, seen):
    if isinstance(schema, list):
        return [resolve(s, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if isinstance(schema.get("$ref"), str):
        name = schema["$ref"].split("/")[-1]
        if name in seen:  # recursive types (JSONSchemaProps): accept anything below
            return {}
        return resolve(definitions[name], seen | {name})
    if schema.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    out = {k: resolve(v, seen) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if "type" in out and out.get("type") != "null" and schema.get("x-nullable"):
        out["type"] = [out["type"], "null"]
    return out


written = 0
for name, definition in definitions.items():
    for gvk in definition.get("x-kubernetes-group-version-kind", []):
        group = gvk["group"].split(".")[0]
        suffix = f"-{group}-{gvk['version']}" if group else f"-{gvk['version']}"
        path = os.path.join(out_dir, f"{gvk['kind'].lower()}{suffix}.json")
        schema = resolve(definition, {name})
        # apiVersion and kind are checked by kubeconform itself.
        with open(path, "w") as f:
            json.dump(schema, f)
        written += 1
print(f"{written} schemas in {out_dir}", file=sys.stderr)
