#!/usr/bin/python3
"""Validates a rendered Helm chart (a `helm template` stream) the way a cluster and an operator would.

    helm_validate.py [--external-claim NAME]... [--daemon-config config/autouvmd.yaml] [--image-uid N] RENDER

Each object is checked against the Kubernetes schemas (k8s_schema.py), then against what the API server
and the controllers check beyond the schemas, and what would only fail once running (helm_checks.py):
- names and labels in Kubernetes' syntax; port names, numbers and uniqueness; probes with one handler,
  on a port of the container;
- a workload's selector matches its pod labels; every volumeMount names a volume or claim template;
  ConfigMaps (and their keys) and PersistentVolumeClaims that volumes name are in the render, or named
  with --external-claim; resource requests within limits, extended resources (GPUs) whole and requested
  only as limits; a StatefulSet's serviceName a headless Service of the render;
- each Service selects pods of the render, on ports their containers have; an HPA scales a workload of
  the render that leaves its replicas to it; a ServiceMonitor scrapes exactly one Service's port;
- ConfigMap entries named *.json or *.yaml parse; a ConfigMap stays under 1 MiB; no two objects share a
  kind, namespace and name.
Then the autouvmd container (the one named autouvmd; check_daemon below): its autouvmd.yaml is a ConfigMap
of the render mounted where the images' entrypoint reads it, parses, and has only keys the daemon knows,
of the types it knows (--daemon-config); it listens on all interfaces on the container's grpc, metrics
and http ports, keeps repository.path, state_dir and the files it reads (admin.token_file,
server.api_key_file, server.tls.*) on mounts; gRPC probes ask the gRPC port, HTTP probes the
metrics port; the grace period outlasts server.drain_timeout; runtime.backend cuda gets a GPU and cpu none;
the pod runs as the images' user (--image-uid).

Prints one "ok" line per object and "kinds: ..." (sorted), exit 0; or one line per error, naming the object
and the field path, exit 1. Not checked: Secrets and claims made outside the chart, admission webhooks and
policies, storage classes, nodes and GPUs, and anything else only a running cluster knows.
"""
import argparse
import posixpath
import re
import sys

import yaml

import helm_checks
import k8s_schema

CONFIG_PATH = "/etc/autouvmd/autouvmd.yaml"  # the images' ENTRYPOINT: autouvmd --config CONFIG_PATH
ALL_INTERFACES = ("0.0.0.0", "[::]", "")


def daemon_config(r, obj, where, c, volumes):
    """The autouvmd.yaml container c reads (a dict), or None after reporting why there is none."""
    args = (c.get("command") or []) + (c.get("args") or [])
    if "--config" in args[:-1] and args[args.index("--config") + 1] != CONFIG_PATH:
        r.error(obj, where + ".args", "--config is not %s" % CONFIG_PATH)
        return None
    for m in c.get("volumeMounts", []):
        volume = volumes.get(m["name"], {})
        if "configMap" not in volume:
            continue
        if m["mountPath"] == CONFIG_PATH and m.get("subPath"):
            file = m["subPath"]
        elif m["mountPath"].rstrip("/") == posixpath.dirname(CONFIG_PATH) and not m.get("subPath"):
            file = posixpath.basename(CONFIG_PATH)
        else:
            continue
        items = volume["configMap"].get("items")
        key = next((i["key"] for i in items if i["path"] == file), None) if items else file
        cm = r.find("ConfigMap", volume["configMap"].get("name"), helm_checks.namespace_of(obj))
        text = ((cm or {}).get("data") or {}).get(key)
        if text is None:
            r.error(obj, where, "%s: no ConfigMap of the render holds it (ConfigMap %s, key %s)"
                    % (CONFIG_PATH, volume["configMap"].get("name"), key))
            return None
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError as e:
            r.error(cm, "data." + key, "does not parse: %s" % e)
            return None
        if not isinstance(cfg, dict):
            r.error(cm, "data." + key, "is not a map of keys")
            return None
        return cfg
    r.error(obj, where, "nothing is mounted at %s: the daemon would run the image's own configuration" % CONFIG_PATH)
    return None


def unknown_keys(cfg, known, path=""):
    """(key path, message) for each key of cfg that the daemon's default configuration (which has every
    key) lacks or types differently. models.<name> takes the keys of model_defaults."""
    for key, value in cfg.items():
        where = path + str(key)
        if key not in known:
            yield where, "unknown key (the daemon would stop at start)"
            continue
        ref = known[key]
        if where == "models" and isinstance(value, dict):
            ref = {name: known["model_defaults"] for name in value}
        if isinstance(ref, dict):
            if isinstance(value, dict):
                yield from unknown_keys(value, ref, where + ".")
            else:
                yield where, "expected a map, got %r" % (value,)
        elif isinstance(ref, bool) != isinstance(value, bool) or \
                (isinstance(ref, (int, float)) and not isinstance(value, (int, float))) or \
                (isinstance(ref, str) and not isinstance(value, str)):
            yield where, "expected a %s like the default %r, got %r" % (type(ref).__name__, ref, value)


def seconds(duration):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(duration))
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[m.group(2)] if m else None


def listen_port(r, obj, key, address, ports, port_name):
    """Checks one listen address of the configuration against the container's port of that name."""
    host, _, port = str(address).rpartition(":")
    if host not in ALL_INTERFACES:
        r.error(obj, key, "%s listens on %s only: the Service and the probes cannot reach it" % (address, host))
    if port_name not in ports:
        r.error(obj, key, "the container has no port named %s" % port_name)
    elif not port.isdigit() or int(port) != ports[port_name]:
        r.error(obj, key, "%s is not the container's %s port %d" % (address, port_name, ports[port_name]))


def check_daemon(ctx):
    """The check of helm_checks.check_workload for each container: the daemon's, for the one named autouvmd."""
    def check(r, obj, i, c, volumes):
        if c["name"] != "autouvmd":
            return
        ctx.daemons += 1
        where = "spec.template.spec.containers[%d]" % i
        pod = obj["spec"]["template"]["spec"]
        cfg = daemon_config(r, obj, where, c, volumes)
        if cfg is None:
            return
        config = "autouvmd.yaml "  # how errors in the configuration are named
        if ctx.daemon_keys is not None:
            for key, message in unknown_keys(cfg, ctx.daemon_keys):
                r.error(obj, config + key, message)
        server = cfg.get("server") or {}
        ports = helm_checks.container_ports(pod)
        listen_port(r, obj, config + "server.listen", server.get("listen", "127.0.0.1:50051"), ports, "grpc")
        metrics = server.get("metrics_listen", "0.0.0.0:9090")
        if metrics:
            listen_port(r, obj, config + "server.metrics_listen", metrics, ports, "metrics")
        http = server.get("http_listen", "127.0.0.1:8000")
        if http:
            listen_port(r, obj, config + "server.http_listen", http, ports, "http")
        mounts = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
        tls = server.get("tls") or {}
        optional = ("admin.token_file", "server.api_key_file", "server.tls.cert_file", "server.tls.key_file",
                    "server.tls.client_ca_file")
        for key, value in (("repository.path", (cfg.get("repository") or {}).get("path")),
                           ("state_dir", cfg.get("state_dir")),
                           ("admin.token_file", (cfg.get("admin") or {}).get("token_file")),
                           ("server.api_key_file", server.get("api_key_file")),
                           ("server.tls.cert_file", tls.get("cert_file")),
                           ("server.tls.key_file", tls.get("key_file")),
                           ("server.tls.client_ca_file", tls.get("client_ca_file"))):
            if key in optional and not value:
                continue
            if not value or not any(str(value) == m or str(value).startswith(m + "/") for m in mounts):
                r.error(obj, config + key, "%r is on no volume the container mounts (%s)" % (value, ", ".join(mounts)))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = c.get(probe) or {}
            if "grpc" in spec and tls.get("cert_file"):
                r.error(obj, "%s.%s.grpc" % (where, probe), "the gRPC port speaks TLS (server.tls), which "
                        "Kubernetes' gRPC probes cannot: ask /readyz on the metrics port")
            for handler, port_name in (("grpc", "grpc"), ("httpGet", "metrics")):
                if handler in spec and ports.get(spec[handler].get("port")) != ports.get(port_name):
                    r.error(obj, "%s.%s.%s.port" % (where, probe, handler), "%r is not the daemon's %s port"
                            % (spec[handler].get("port"), port_name))
        drain = seconds(server.get("drain_timeout", "30s"))
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if drain is None:
            r.error(obj, config + "server.drain_timeout", "not a duration: %r" % server.get("drain_timeout"))
        elif grace <= drain:
            r.error(obj, "spec.template.spec.terminationGracePeriodSeconds",
                    "%d s is not longer than server.drain_timeout (%s): the daemon is killed while draining"
                    % (grace, server.get("drain_timeout")))
        backend = (cfg.get("runtime") or {}).get("backend", "cpu")
        limits = (c.get("resources") or {}).get("limits") or {}
        gpus = [k for k in limits if k.endswith("/gpu") or k.startswith("nvidia.com/")]
        if backend == "cuda" and not gpus:
            r.error(obj, where + ".resources.limits", "runtime.backend is cuda but the container gets no GPU")
        elif backend == "cuda" and (len(gpus) > 1 or k8s_schema.quantity_value(limits[gpus[0]]) != 1):
            r.error(obj, where + ".resources.limits", "more than one GPU: the daemon uses GPU 0 only")
        elif backend != "cuda" and gpus:
            r.error(obj, where + ".resources.limits",
                    "runtime.backend is %s but the container takes %s" % (backend, gpus[0]))
        if ctx.image_uid is not None:
            uid = (c.get("securityContext") or {}).get("runAsUser", (pod.get("securityContext") or {}).get("runAsUser"))
            if uid is not None and uid != ctx.image_uid:
                r.error(obj, where + ".securityContext.runAsUser", "%d is not the images' user %d, who owns "
                        "/models and /state in them" % (uid, ctx.image_uid))
    return check


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("render")
    ap.add_argument("--external-claim", action="append", default=[], dest="external_claims",
                    help="a PersistentVolumeClaim that exists outside the chart")
    ap.add_argument("--daemon-config", help="config/autouvmd.yaml: every key the daemon knows, with its default")
    ap.add_argument("--image-uid", type=int, help="the user the images run as")
    ctx = ap.parse_args()
    ctx.daemons = 0
    ctx.daemon_keys = None
    if ctx.daemon_config:
        with open(ctx.daemon_config) as f:
            ctx.daemon_keys = yaml.safe_load(f)
    r = helm_checks.Render(ctx.render)  # checks each object against its schema
    helm_checks.check_unique(r)
    # The other checks read fields the schemas require, so they run on schema-valid objects only.
    for obj in r.valid:
        helm_checks.check_names(r, obj)
        kind = obj["kind"]
        if kind in helm_checks.WORKLOADS:
            helm_checks.check_workload(r, obj, ctx.external_claims, check_daemon(ctx))
        elif kind == "Service":
            helm_checks.check_service(r, obj)
        elif kind == "HorizontalPodAutoscaler":
            helm_checks.check_hpa(r, obj)
        elif kind == "ServiceMonitor":
            helm_checks.check_service_monitor(r, obj)
        elif kind == "ConfigMap":
            helm_checks.check_configmap(r, obj)
    if not r.errors and ctx.daemons == 0:
        r.errors.append("no workload has an autouvmd container")
    for e in r.errors:
        print("%s: %s" % (ctx.render, e))
    if r.errors:
        return 1
    for source, obj in r.objects:
        print("ok %s/%s (%s)" % (obj["kind"], obj["metadata"]["name"], source))
    print("kinds: " + " ".join(sorted(o["kind"] for _, o in r.objects)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
