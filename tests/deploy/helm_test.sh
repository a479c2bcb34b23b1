#!/usr/bin/env bash
# The Helm chart (deploy/helm/autouvmd), rendered by a real Go template engine and every rendered object
# validated against the Kubernetes schemas. Helm is not in Debian 12, so:
# - tools/helm-render, Go's text/template with Debian's sprig, renders the chart as `helm template` would
#   (built here in GOPATH mode from Debian's Go sources: no module downloads);
# - tests/deploy/helm_validate.py checks each object against python3-kubernetes' models of the Kubernetes
#   API (with the few later additions the chart uses) and across objects, and the daemon's configuration.
# Renders: the default values; tests/deploy/helm-values/everything-on.yaml (every option on, other ports);
# cpu-only.yaml with --sets (API keys). Then values the chart must refuse, and broken renders the validator
# must refuse, each with the message naming the object and the field.
# Usage: helm_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
out=$(mkdir -p "$2/helm-test" && cd "$2/helm-test" && pwd)
chart=$src/deploy/helm/autouvmd
py=/usr/bin/python3 # Debian's, with python3-kubernetes and python3-yaml
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v go >/dev/null || fail "go is missing: install tools/debian-packages-test.txt (golang-go): tools/install-deps.sh --test"
[ -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || fail "sprig is missing (golang-github-masterminds-sprig-dev)"
$py -c 'import kubernetes, yaml' || fail "python3-kubernetes or python3-yaml is missing"
(cd "$src/tools/helm-render" \
  && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/gocache" GOFLAGS='' go build -o "$out/helm-render" .)

# The user both images run as (the chart's podSecurityContext must be it).
uid=$(grep -h '^USER ' "$src/Dockerfile" "$src/deploy/Dockerfile.cpu" | awk '{print $2}' | cut -d: -f1 | sort -u)
[[ "$uid" =~ ^[0-9]+$ ]] || fail "the images' USER lines disagree or are not numeric: $uid"

render() { # render OUT [helm-render flags]: the chart as release "t"
  local file=$1
  shift
  "$out/helm-render" --strict --notes-out "$file.notes" "$@" t "$chart" > "$file"
}
validate() { # validate RENDER [validator flags]
  $py "$src/tests/deploy/helm_validate.py" --daemon-config "$src/config/autouvmd.yaml" --image-uid "$uid" "$@"
}
expect_kinds() { # expect_kinds NAME "KIND..." VALIDATOR_OUTPUT
  local got
  got=$(sed -n 's/^kinds: //p' <<< "$3")
  [ "$got" = "$2" ] || fail "$1: rendered kinds are '$got', expected '$2'"
}
has() { # has NAME FILE TEXT...: each TEXT is a line (trimmed) of FILE
  local name=$1 file=$2
  shift 2
  for text in "$@"; do
    sed 's/^ *//' "$file" | grep -xF -- "$text" > /dev/null || fail "$name: no line '$text' in the render"
  done
}

# 1. Default values.
render "$out/default.yaml" || fail "the default values do not render"
v=$(validate "$out/default.yaml") || fail "default values: $v"
expect_kinds default "ConfigMap ConfigMap PersistentVolumeClaim Service Service StatefulSet" "$v"
has default "$out/default.yaml" "listen: 0.0.0.0:50051" "metrics_listen: 0.0.0.0:9090" "http_listen: 0.0.0.0:8000" \
  "containerPort: 8000" "port: 8000" "targetPort: http" "backend: cuda" "nvidia.com/gpu: 1" \
  'image: "autouvmd:cuda"' "grafana_dashboard: \"1\"" "runAsUser: $uid"
if grep -q 'api_key_file' "$out/default.yaml"; then fail "default: an api_key_file without apiKeys.existingSecret"; fi
# The dashboard ConfigMap carries deploy/grafana/autouvmd.json as it is (through the chart's link to it).
$py - "$out/default.yaml" "$src/deploy/grafana/autouvmd.json" <<'EOF' \
  || fail "the dashboard ConfigMap is not deploy/grafana/autouvmd.json"
import sys, yaml
cm = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["metadata"]["name"].endswith("-dashboard"))
sys.exit(cm["data"]["autouvmd.json"].rstrip("\n") != open(sys.argv[2]).read().rstrip("\n"))
EOF
grep -q "rollout status statefulset/t-autouvmd" "$out/default.yaml.notes" || fail "NOTES.txt did not render"
has default-notes "$out/default.yaml.notes" "kubectl -n default port-forward svc/t-autouvmd 8000:8000" \
  "curl -s http://127.0.0.1:8000/v1/models"

# 2. Everything on: other ports flow through to the configuration, the Service and the probes.
render "$out/on.yaml" -f "$src/tests/deploy/helm-values/everything-on.yaml" || fail "everything-on.yaml does not render"
v=$(validate "$out/on.yaml" --external-claim models-nfs) || fail "everything-on.yaml: $v"
expect_kinds everything-on \
  "ConfigMap ConfigMap HorizontalPodAutoscaler Service Service ServiceAccount ServiceMonitor StatefulSet" "$v"
has everything-on "$out/on.yaml" "listen: 0.0.0.0:8001" "metrics_listen: 0.0.0.0:8002" "http_listen: 0.0.0.0:8003" \
  "containerPort: 8001" "containerPort: 8002" "containerPort: 8003" "port: 8001" "port: 443" "port: 8080" \
  "port: 8443" "claimName: models-nfs" "nvidia.com/gpu: 1" \
  'image: "registry.example.com/llm/autouvmd:0.1.0-cuda13"' "value: \"103079215104\"" \
  "token_file: /var/run/secrets/autouvmd/admin/admin-token" "terminationGracePeriodSeconds: 180" \
  "api_key_file: /var/run/secrets/autouvmd/api-keys/openai-keys" "mountPath: /var/run/secrets/autouvmd/api-keys" \
  "secretName: llm-api-keys" "- key: openai-keys" \
  "name: autouvm_queue_time_p90_seconds" "grafana_dashboard: autouvmd" \
  "cert_file: /var/run/secrets/autouvmd/tls/tls.crt" "key_file: /var/run/secrets/autouvmd/tls/tls.key" \
  "client_ca_file: /var/run/secrets/autouvmd/tls/ca.crt" "require_client_cert: true" "secretName: llm-tls" \
  "path: /readyz"
has everything-on-notes "$out/on.yaml.notes" "kubectl -n default port-forward svc/llm 8000:8443" \
  'https://NAME-ON-THE-CERTIFICATE:8000/v1/models -H "Authorization: Bearer $AUTOUVM_API_KEY"'
if grep -q '^ *grpc:$' "$out/on.yaml"; then fail "everything-on: a gRPC probe on the TLS port"; fi
if grep -q '^  replicas:' "$out/on.yaml"; then fail "everything-on: the StatefulSet sets replicas under an HPA"; fi
# Without the claim given as existing, its absence is an error.
if v=$(validate "$out/on.yaml"); then fail "a missing claim was accepted"; fi
grep -qF "claimName: no PersistentVolumeClaim 'models-nfs'" <<< "$v" || fail "missing claim: $v"

# 3. CPU only, with --sets on top of the file (API keys under the default key).
render "$out/cpu.yaml" -f "$src/tests/deploy/helm-values/cpu-only.yaml" --set replicaCount=2 \
  --set apiKeys.existingSecret=t-api-keys || fail "cpu-only.yaml does not render"
v=$(validate "$out/cpu.yaml") || fail "cpu-only.yaml: $v"
expect_kinds cpu-only "ConfigMap Service Service StatefulSet" "$v"
has cpu-only "$out/cpu.yaml" "backend: cpu" 'image: "autouvmd:cpu"' "replicas: 2" "enabled: false" \
  'args: ["--log-format", "json", "--log-level", "info"]' "api_key_file: /var/run/secrets/autouvmd/api-keys/api-keys" \
  "secretName: t-api-keys" "- key: api-keys" "path: api-keys"
if grep -q 'nvidia.com/gpu' "$out/cpu.yaml"; then fail "cpu-only: a GPU is requested"; fi

# 4. Values the chart refuses, with the reason.
refused=0
refuse() { # refuse EXPECTED [helm-render flags]
  local expected=$1 msg
  shift
  refused=$((refused + 1))
  if msg=$(render "$out/refused.yaml" "$@" 2>&1); then fail "rendered with $*"; fi
  grep -qF -- "$expected" <<< "$msg" || fail "with $*: expected '$expected', got: $msg"
}
refuse "config.server.listen is set by the chart" --set config.server.listen=0.0.0.0:1
refuse "config.server.http_listen is set by the chart" --set config.server.http_listen=0.0.0.0:1
refuse "config.server.api_key_file is set by the chart from apiKeys.existingSecret" \
  --set apiKeys.existingSecret=t-api-keys --set config.server.api_key_file=/etc/keys
refuse "config.state_dir is set by the chart" --set config.state_dir=/data
refuse "must be longer than config.server.drain_timeout (30s)" --set terminationGracePeriodSeconds=30
refuse 'config.server.drain_timeout: "30" is not a duration' --set config.server.drain_timeout=30
refuse "models.readOnly: the daemon writes" --set models.readOnly=true
refuse "logFormat: 'yaml' is not one of json, text" --set logFormat=yaml
refuse "logLevel: 'loud' is not one of debug, info, warning, error" --set logLevel=loud
refuse "autoscaling.minReplicas (5) is above autoscaling.maxReplicas (4)" \
  --set autoscaling.enabled=true --set autoscaling.minReplicas=5
refuse "requires kubeVersion >=1.24.0-0" --kube-version v1.23.0
refuse "tls.clientCertificates: 'maybe' is not one of none, verify, require" \
  --set tls.existingSecret=t-tls --set tls.clientCertificates=maybe
refuse "config.server.tls.cert_file is set by the chart from tls.existingSecret" \
  --set tls.existingSecret=t-tls --set config.server.tls.cert_file=/etc/x.crt
# --strict: a template that names a value values.yaml lacks fails instead of rendering empty.
rm -rf "$out/typo" && cp -rL "$chart" "$out/typo"
sed -i 's/\.Values\.image\.pullPolicy/.Values.image.pullPolicyy/' "$out/typo/templates/statefulset.yaml"
if msg=$("$out/helm-render" --strict t "$out/typo" 2>&1); then fail "--strict rendered a misspelt value"; fi
grep -qF 'map has no entry for key "pullPolicyy"' <<< "$msg" || fail "--strict: $msg"
refused=$((refused + 1))

# 5. Broken renders the validator refuses, each naming the object and the field.
mutate() { # mutate IN OUT KIND/NAME PATH (set YAML | delete | replace OLD NEW): PATH a/b/0/c
  # ('~1' for a '/' in a key, as in JSON pointers), or "" for the whole object
  $py - "$@" <<'EOF'
import sys, yaml
src, dst, ref, path, op = sys.argv[1:6]
docs = [d for d in yaml.safe_load_all(open(src)) if d]
obj = next(d for d in docs if "%s/%s" % (d["kind"], d["metadata"]["name"]) == ref)
keys = [int(k) if k.isdigit() else k.replace("~1", "/") for k in path.split("/")] if path else []
parent = obj
for k in keys[:-1]:
    parent = parent[k]
if not keys:
    docs.remove(obj)
elif op == "set":
    parent[keys[-1]] = yaml.safe_load(sys.argv[6])
elif op == "delete":
    del parent[keys[-1]]
elif op == "replace":
    assert sys.argv[6] in parent[keys[-1]], "nothing to replace"
    parent[keys[-1]] = parent[keys[-1]].replace(sys.argv[6], sys.argv[7])
yaml.safe_dump_all(docs, open(dst, "w"), sort_keys=False)
EOF
}
broken=0
reject() { # reject RENDER EXPECTED KIND/NAME PATH OP [ARGS]: the mutated render fails with EXPECTED
  local base=$1 expected=$2 v
  shift 2
  broken=$((broken + 1))
  mutate "$base" "$out/broken.yaml" "$@"
  if v=$(validate "$out/broken.yaml" --external-claim models-nfs); then
    fail "broken render $broken ($*) was accepted"
  fi
  grep -qF -- "$expected" <<< "$v" || fail "broken render $broken ($*): expected '$expected', got: $v"
}
d=$out/default.yaml
sts=StatefulSet/t-autouvmd
c=spec/template/spec/containers/0
in_c="$sts: spec.template.spec.containers[0]" # how errors name that container
reject "$d" "$in_c.securityContext.runAsUserr: unknown field of V1SecurityContext" \
  "$sts" "$c/securityContext/runAsUserr" set 10001
reject "$d" "$in_c.ports[0].containerPort: expected an integer, got str '50051'" \
  "$sts" "$c/ports/0/containerPort" set "'50051'"
reject "$d" "$sts: spec.serviceName: required field missing (V1StatefulSetSpec)" "$sts" spec/serviceName delete
reject "$d" "$in_c.readinessProbe.grpc.port: 50052 is not a port of container autouvmd" \
  "$sts" "$c/readinessProbe/grpc/port" set 50052
reject "$d" "$in_c.startupProbe.grpc.port: required field missing (V1GRPCAction)" \
  "$sts" "$c/startupProbe/grpc/port" delete
reject "$d" "$in_c.livenessProbe.httpGet.port: 'grpc' is not the daemon's metrics port" \
  "$sts" "$c/livenessProbe/httpGet/port" set grpc
reject "$d" "$in_c.volumeMounts[3].name: no volume or volumeClaimTemplate 'scratch'" \
  "$sts" "$c/volumeMounts/3/name" set scratch
reject "$d" "$in_c.resources.requests.nvidia.com/gpu: an extended resource's request must equal its limit" \
  "$sts" "$c/resources/requests" set '{nvidia.com/gpu: 2}'
reject "$d" "$in_c.resources.limits: more than one GPU: the daemon uses GPU 0 only" \
  "$sts" "$c/resources/limits/nvidia.com~1gpu" set 2
reject "$d" "$sts: spec.selector: does not select the pod template's labels" \
  "$sts" spec/selector/matchLabels/app.kubernetes.io~1instance set x
reject "$d" "$sts: spec.template.spec.volumes[1].persistentVolumeClaim.claimName: no PersistentVolumeClaim" \
  PersistentVolumeClaim/t-autouvmd-models "" delete
reject "$d" "$sts: autouvmd.yaml server.listen: 0.0.0.0:50052 is not the container's grpc port 50051" \
  ConfigMap/t-autouvmd data/autouvmd.yaml replace 0.0.0.0:50051 0.0.0.0:50052
reject "$d" "$sts: autouvmd.yaml server.http_listen: 0.0.0.0:8001 is not the container's http port 8000" \
  ConfigMap/t-autouvmd data/autouvmd.yaml replace 0.0.0.0:8000 0.0.0.0:8001
reject "$d" "$sts: autouvmd.yaml server.http_listen: the container has no port named http" \
  "$sts" "$c/ports/2" delete
reject "$d" "$sts: autouvmd.yaml server.lisen: unknown key" \
  ConfigMap/t-autouvmd data/autouvmd.yaml replace "  listen:" "  lisen:"
reject "$d" "Service/t-autouvmd: spec.ports[1].targetPort: 'metricz' is not a container port of StatefulSet t-autouvmd" \
  Service/t-autouvmd spec/ports/1/targetPort set metricz
reject "$d" "ConfigMap/t-autouvmd-dashboard: data.autouvmd.json: does not parse" \
  ConfigMap/t-autouvmd-dashboard data/autouvmd.json replace '"panels": [' '"panels": [,'
o=$out/on.yaml
reject "$o" "HorizontalPodAutoscaler/llm: spec.scaleTargetRef: StatefulSet llm sets spec.replicas" \
  StatefulSet/llm spec/replicas set 2
reject "$o" "HorizontalPodAutoscaler/llm: spec.metrics[0].pods.target.averageValue: expected a quantity" \
  HorizontalPodAutoscaler/llm spec/metrics/0/pods/target/averageValue set "'fast'"
reject "$o" "ServiceMonitor/llm: spec.endpoints[0].port: port 'grpc' is on 2 selected Services" \
  ServiceMonitor/llm spec/endpoints/0/port set grpc
reject "$o" "ServiceMonitor/llm: spec.endpoints[0].intervall: unknown field of ServiceMonitorEndpoint" \
  ServiceMonitor/llm spec/endpoints/0/intervall set 15s
in_llm="StatefulSet/llm: spec.template.spec.containers[0]"
reject "$o" "$in_llm.readinessProbe.grpc: the gRPC port speaks TLS (server.tls)" \
  StatefulSet/llm "$c/readinessProbe" set '{grpc: {port: 8001}}'
reject "$o" "StatefulSet/llm: autouvmd.yaml server.tls.cert_file: '/etc/tls/tls.crt' is on no volume" \
  ConfigMap/llm data/autouvmd.yaml replace /var/run/secrets/autouvmd/tls/tls.crt /etc/tls/tls.crt
reject "$o" "StatefulSet/llm: autouvmd.yaml server.api_key_file: '/etc/keys/openai-keys' is on no volume" \
  ConfigMap/llm data/autouvmd.yaml replace /var/run/secrets/autouvmd/api-keys/ /etc/keys/

echo "helm: 3 renders valid (default, everything-on, cpu-only), $refused bad values refused, $broken broken renders caught"
