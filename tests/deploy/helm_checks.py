"""Checks of rendered Kubernetes objects beyond their schemas: what the API server, the controllers and the
kubelet would refuse or fail on, and references between the objects of one render (helm_validate.py).

Each check takes the Render and one object whose schema checked out (k8s_schema.py), so the fields the
schema requires are there, and reports through Render.error with the object and the field path.
"""
import json
import re

import yaml

import k8s_schema

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")  # IANA_SVC_NAME, also at most 15 characters
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
WORKLOADS = ("StatefulSet", "Deployment")


class Render:
    """The objects of one render, each checked against its schema on loading, and the errors found."""

    def __init__(self, path):
        self.objects = []  # (source template, object), every object of the render
        self.valid = []  # the objects whose schema checked out: the only ones the checks below read
        self.errors = []
        with open(path) as f:
            text = f.read()
        for doc in re.split(r"(?m)^---\s*$", text):
            source = re.search(r"(?m)^# Source: (\S+)", doc)
            source = source.group(1) if source else None
            obj = yaml.safe_load(doc)
            if obj is None:
                continue
            self.objects.append((source, obj))
            errors = k8s_schema.validate(obj)
            for field, message in errors:
                self.error(obj, field, message + (" [%s]" % source if source else ""))
            if not errors:
                self.valid.append(obj)

    def error(self, obj, path, message):
        md = obj.get("metadata") or {}
        self.errors.append("%s/%s: %s%s" % (obj.get("kind"), md.get("name"), path + ": " if path else "", message))

    def of_kind(self, *kinds):
        return [o for o in self.valid if o["kind"] in kinds]

    def find(self, kind, name, namespace):
        for o in self.of_kind(kind):
            if o["metadata"].get("name") == name and namespace_of(o) == namespace:
                return o
        return None


def namespace_of(obj):
    return (obj.get("metadata") or {}).get("namespace", "")


def labels_match(selector, labels):
    """Whether a LabelSelector ({matchLabels, matchExpressions}) or a Service's plain map selects labels.
    An empty selector selects nothing here: a workload's must not be empty, and a Service's would select
    every pod of the namespace."""
    if not selector:
        return False
    if "matchLabels" in selector or "matchExpressions" in selector:
        match, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    else:
        match, expressions = selector, []
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in expressions:
        has, values = e["key"] in labels, e.get("values", [])
        ok = {"In": has and labels[e["key"]] in values, "NotIn": not has or labels[e["key"]] not in values,
              "Exists": has, "DoesNotExist": not has}.get(e["operator"], False)
        if not ok:
            return False
    return True


def check_labels(r, obj, path, labels):
    for k, v in (labels or {}).items():
        prefix, _, name = k.rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix))) \
                or len(name) > 63 or not LABEL_NAME.fullmatch(name):
            r.error(obj, "%s.%s" % (path, k), "not a valid label key")
        if not isinstance(v, str) or len(v) > 63 or (v and not LABEL_NAME.fullmatch(v)):
            r.error(obj, "%s.%s" % (path, k), "%r is not a valid label value" % (v,))


def check_names(r, obj):
    name = obj["metadata"].get("name", "")
    kind = obj["kind"]
    if kind == "Service":
        ok = len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    else:
        ok = len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name)
    if not ok:
        r.error(obj, "metadata.name", "%r is not a valid name for a %s" % (name, kind))
    if kind == "StatefulSet" and len(name) > 52:
        r.error(obj, "metadata.name", "longer than 52 characters: its pods' controller-revision-hash label "
                "would pass 63 and no pod would be made")
    check_labels(r, obj, "metadata.labels", obj["metadata"].get("labels"))


def container_ports(pod_spec):
    """{name or number: number} of every container's ports."""
    ports = {}
    for c in pod_spec.get("containers", []):
        for p in c.get("ports", []):
            ports[p["containerPort"]] = p["containerPort"]
            if p.get("name"):
                ports[p["name"]] = p["containerPort"]
    return ports


def check_container(r, obj, path, c, ports, mountable):
    seen = set()
    for i, p in enumerate(c.get("ports", [])):
        where = "%s.ports[%d]" % (path, i)
        name = p.get("name")
        if name is not None and (len(name) > 15 or not PORT_NAME.fullmatch(name)
                                 or not re.search("[a-z]", name) or "--" in name):
            r.error(obj, where + ".name", "%r is not a port name (IANA_SVC_NAME, at most 15)" % name)
        if not 1 <= p["containerPort"] <= 65535:
            r.error(obj, where + ".containerPort", "%d is not a port number" % p["containerPort"])
        for key in (name, p["containerPort"]):
            if key is not None and key in seen:
                r.error(obj, where, "port %r is declared twice" % (key,))
            seen.add(key)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = c.get(probe)
        if spec is None:
            continue
        handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if h in spec]
        if len(handlers) != 1:
            r.error(obj, "%s.%s" % (path, probe), "needs exactly one of exec, httpGet, tcpSocket, grpc; has %s"
                    % (handlers or "none"))
        for h in handlers:
            port = spec[h].get("port") if h != "exec" else None
            if h != "exec" and port not in ports:
                r.error(obj, "%s.%s.%s.port" % (path, probe, h), "%r is not a port of container %s"
                        % (port, c["name"]))
    mounts = set()
    for i, m in enumerate(c.get("volumeMounts", [])):
        if m["name"] not in mountable:
            r.error(obj, "%s.volumeMounts[%d].name" % (path, i), "no volume or volumeClaimTemplate %r" % m["name"])
        if m["mountPath"] in mounts:
            r.error(obj, "%s.volumeMounts[%d].mountPath" % (path, i), "%s is mounted twice" % m["mountPath"])
        mounts.add(m["mountPath"])
    resources = c.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for res in sorted(set(limits) | set(requests)):
        where = "%s.resources.%%s.%s" % (path, res)
        lim, req = k8s_schema.quantity_value(limits.get(res)), k8s_schema.quantity_value(requests.get(res))
        if "/" in res and not res.startswith("kubernetes.io/"):  # an extended resource, e.g. a GPU
            if lim is None:
                r.error(obj, where % "requests", "an extended resource needs a limit")
            elif lim != int(lim):
                r.error(obj, where % "limits", "an extended resource is a whole number")
            elif req is not None and req != lim:
                r.error(obj, where % "requests", "an extended resource's request must equal its limit")
        elif lim is not None and req is not None and req > lim:
            r.error(obj, where % "requests", "above its limit %s" % limits[res])


def check_workload(r, obj, external_claims, check_container_more):
    spec = obj["spec"]
    pod_meta = spec["template"].get("metadata") or {}
    pod = spec["template"]["spec"]
    check_labels(r, obj, "spec.template.metadata.labels", pod_meta.get("labels"))
    if not labels_match(spec["selector"], pod_meta.get("labels") or {}):
        r.error(obj, "spec.selector", "does not select the pod template's labels")
    ns = namespace_of(obj)
    volumes = {}
    for i, v in enumerate(pod.get("volumes", [])):
        where = "spec.template.spec.volumes[%d]" % i
        if v["name"] in volumes:
            r.error(obj, where + ".name", "volume %r is declared twice" % v["name"])
        volumes[v["name"]] = v
        if "configMap" in v:
            cm = r.find("ConfigMap", v["configMap"].get("name"), ns)
            if cm is None and not v["configMap"].get("optional"):
                r.error(obj, where + ".configMap.name", "no ConfigMap %r in the render" % v["configMap"].get("name"))
            for j, item in enumerate(v["configMap"].get("items", []) if cm else []):
                if item["key"] not in (cm.get("data") or {}):
                    r.error(obj, "%s.configMap.items[%d].key" % (where, j), "ConfigMap %s has no key %r"
                            % (cm["metadata"]["name"], item["key"]))
        if "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"]["claimName"]
            if r.find("PersistentVolumeClaim", claim, ns) is None and claim not in external_claims:
                r.error(obj, where + ".persistentVolumeClaim.claimName", "no PersistentVolumeClaim %r in the "
                        "render or given as existing (--external-claim)" % claim)
    mountable = set(volumes)
    for i, t in enumerate(spec.get("volumeClaimTemplates", [])):
        name = t["metadata"]["name"]
        if name in volumes:
            r.error(obj, "spec.volumeClaimTemplates[%d]" % i, "%r is also a volume of the pod" % name)
        mountable.add(name)
    ports = container_ports(pod)
    names = set()
    for i, c in enumerate(pod["containers"]):
        if c["name"] in names:
            r.error(obj, "spec.template.spec.containers[%d].name" % i, "container %r twice" % c["name"])
        names.add(c["name"])
        check_container(r, obj, "spec.template.spec.containers[%d]" % i, c, ports, mountable)
        check_container_more(r, obj, i, c, volumes)
    if obj["kind"] == "StatefulSet":
        svc = r.find("Service", spec["serviceName"], ns)
        if svc is None or svc["spec"].get("clusterIP") != "None":
            r.error(obj, "spec.serviceName", "%r is not a headless Service of the render" % spec["serviceName"])


def check_service(r, obj):
    spec = obj["spec"]
    selected = [w for w in r.of_kind(*WORKLOADS) if namespace_of(w) == namespace_of(obj)
                and labels_match(spec.get("selector"), (w["spec"]["template"].get("metadata") or {}).get("labels", {}))]
    if not selected:
        r.error(obj, "spec.selector", "selects no pods of the render")
    names = set()
    for i, p in enumerate(spec.get("ports", [])):
        where = "spec.ports[%d]" % i
        if p.get("name") in names:
            r.error(obj, where + ".name", "port name %r twice" % p.get("name"))
        names.add(p.get("name"))
        if p.get("name") is not None and not (len(p["name"]) <= 63 and DNS_LABEL.fullmatch(p["name"])):
            r.error(obj, where + ".name", "%r is not a DNS label" % p["name"])
        if not 1 <= p["port"] <= 65535:
            r.error(obj, where + ".port", "%d is not a port number" % p["port"])
        target = p.get("targetPort", p["port"])
        for w in selected:
            if target not in container_ports(w["spec"]["template"]["spec"]):
                r.error(obj, where + ".targetPort", "%r is not a container port of %s %s"
                        % (target, w["kind"], w["metadata"]["name"]))


def check_hpa(r, obj):
    spec = obj["spec"]
    ref = spec["scaleTargetRef"]
    target = r.find(ref["kind"], ref["name"], namespace_of(obj))
    if target is None or target["apiVersion"] != ref.get("apiVersion"):
        r.error(obj, "spec.scaleTargetRef", "no %s %s %s in the render"
                % (ref.get("apiVersion"), ref["kind"], ref["name"]))
    elif "replicas" in target["spec"]:
        r.error(obj, "spec.scaleTargetRef", "%s %s sets spec.replicas, which every upgrade would reset under the "
                "autoscaler" % (ref["kind"], ref["name"]))
    if not 1 <= spec.get("minReplicas", 1) <= spec["maxReplicas"]:
        r.error(obj, "spec.minReplicas", "must be 1 to maxReplicas (%d)" % spec["maxReplicas"])
    for i, m in enumerate(spec.get("metrics", [])):
        member = m["type"][0].lower() + m["type"][1:]
        others = [k for k in m if k not in ("type", member)]
        if member not in m or others:
            r.error(obj, "spec.metrics[%d]" % i, "type %s needs %s and nothing else" % (m["type"], member))
        target = (m.get(member) or {}).get("target", {})
        needed = {"AverageValue": "averageValue", "Value": "value", "Utilization": "averageUtilization"}
        if target and needed.get(target.get("type")) not in target:
            r.error(obj, "spec.metrics[%d].%s.target" % (i, member), "type %s needs %s"
                    % (target.get("type"), needed.get(target.get("type"), "a known type")))


def check_service_monitor(r, obj):
    spec = obj["spec"]
    namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [namespace_of(obj)]
    services = [s for s in r.of_kind("Service") if namespace_of(s) in namespaces
                and labels_match(spec["selector"], s["metadata"].get("labels") or {})]
    for i, e in enumerate(spec.get("endpoints", [])):
        having = [s["metadata"]["name"] for s in services
                  if any(p.get("name") == e.get("port") for p in s["spec"].get("ports", []))]
        if len(having) != 1:
            r.error(obj, "spec.endpoints[%d].port" % i, "port %r is on %d selected Services %s: %s"
                    % (e.get("port"), len(having), having, "nothing is scraped" if not having
                       else "each pod would be scraped once per Service"))


def check_unique(r):
    """Two objects of one kind, name and namespace: Helm refuses to install the release."""
    seen = set()
    for _, obj in r.objects:
        key = (obj.get("kind"), namespace_of(obj), (obj.get("metadata") or {}).get("name"))
        if key in seen:
            r.error(obj, "metadata.name", "a second %s of that name in the namespace" % key[0])
        seen.add(key)


def check_configmap(r, obj):
    data = obj.get("data") or {}
    size = sum(len(k) + len(v.encode()) for k, v in data.items() if isinstance(v, str))
    if size > 1 << 20:
        r.error(obj, "data", "%d bytes, above a ConfigMap's 1 MiB" % size)
    for key, value in data.items():
        if not CONFIGMAP_KEY.fullmatch(key):
            r.error(obj, "data." + key, "not a valid ConfigMap key")
        try:
            if key.endswith(".json"):
                json.loads(value)
            elif key.endswith((".yaml", ".yml")):
                yaml.safe_load(value)
        except (ValueError, yaml.YAMLError) as e:
            r.error(obj, "data." + key, "does not parse: %s" % e)
