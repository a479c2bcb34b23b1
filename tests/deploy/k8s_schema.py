"""Strict schema checks of Kubernetes objects against the Kubernetes Python client's generated models.

Debian 12's python3-kubernetes (22.6) holds one model class per definition of Kubernetes 1.22's OpenAPI
spec: `openapi_types` (field -> type, e.g. 'int', 'dict(str, str)', 'list[V1Container]'),
`attribute_map` (field -> JSON key) and setters that refuse None for a required field. `validate(obj)`
walks an object against them: every key must be a field of its type, every value of the field's type,
every required field present. Errors name the field by its path: spec.template.spec.containers[0].name.

What the 1.22 models lack, and the chart uses, is added here in the models' notation, each with the
Kubernetes version it comes from (EXTRA_FIELDS, EXTRA_SCHEMAS, KINDS): the native gRPC probe, the
autoscaling/v2 API, and prometheus-operator's ServiceMonitor (a CRD, with no schema in any Debian package).

The models type Kubernetes' quantities ('1', '500m', '50Gi') and int-or-string fields ('object') loosely;
QUANTITY_FIELDS and INT_OR_STRING make them strict. Formats the OpenAPI types do not carry (names, label
syntax) and rules between fields are checked by helm_validate.py.
"""
import difflib
import re

import kubernetes.client.models as models
from kubernetes.client.configuration import Configuration

# (apiVersion, kind) -> the model the object is checked against.
KINDS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    # autoscaling/v2 went GA in Kubernetes 1.23 as autoscaling/v2beta2 renamed, every field the same; the
    # 1.22 models have v2beta2 only.
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2beta2HorizontalPodAutoscaler",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "ServiceMonitor",
}

# Fields added to a model after 1.22: model -> {JSON key: type}.
EXTRA_FIELDS = {
    # core/v1 Probe.grpc: the native gRPC health probe; alpha in 1.23, beta and on by default in 1.24, GA
    # in 1.27 (KEP-2727).
    "V1Probe": {"grpc": "V1GRPCAction"},
}

# Types no model describes: name -> ({JSON key: type}, {required JSON keys}).
EXTRA_SCHEMAS = {
    # core/v1 GRPCAction (Kubernetes 1.24): a port number (no port names) and the service to ask about.
    "V1GRPCAction": ({"port": "int", "service": "str"}, {"port"}),
    # monitoring.coreos.com/v1 ServiceMonitor, written from prometheus-operator's API reference
    # (Documentation/api.md, v0.6x): the object and the fields of its spec that charts commonly set,
    # strictly typed; fields outside this list are refused, so a new one must be added here first.
    "ServiceMonitor": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                        "spec": "ServiceMonitorSpec"}, {"spec"}),
    "ServiceMonitorSpec": ({"jobLabel": "str", "targetLabels": "list[str]", "podTargetLabels": "list[str]",
                            "endpoints": "list[ServiceMonitorEndpoint]", "selector": "V1LabelSelector",
                            "namespaceSelector": "ServiceMonitorNamespaceSelector", "sampleLimit": "int",
                            "targetLimit": "int"}, {"endpoints", "selector"}),  # older releases need both
    "ServiceMonitorNamespaceSelector": ({"any": "bool", "matchNames": "list[str]"}, set()),
    "ServiceMonitorEndpoint": ({"port": "str", "targetPort": "object", "path": "str", "scheme": "str",
                                "params": "dict(str, list[str])", "interval": "str", "scrapeTimeout": "str",
                                "honorLabels": "bool", "honorTimestamps": "bool", "followRedirects": "bool",
                                "enableHttp2": "bool", "relabelings": "list[RelabelConfig]",
                                "metricRelabelings": "list[RelabelConfig]"}, set()),
    "RelabelConfig": ({"sourceLabels": "list[str]", "separator": "str", "targetLabel": "str", "regex": "str",
                       "modulus": "int", "replacement": "str", "action": "str"}, set()),
}

# Quantities the models type as 'str': Kubernetes takes a number or a string in quantity syntax.
QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"): "dict(str, quantity)",
    ("V1ResourceRequirements", "requests"): "dict(str, quantity)",
    ("V1EmptyDirVolumeSource", "sizeLimit"): "quantity",
    ("V1ResourceFieldSelector", "divisor"): "quantity",
    ("V2beta2MetricTarget", "averageValue"): "quantity",
    ("V2beta2MetricTarget", "value"): "quantity",
}
# Every 'object' field of the kinds above (ports, maxSurge, maxUnavailable, ...) is an int-or-string.
INT_OR_STRING = "object"

QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
_SUFFIX = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity_value(q):
    """A quantity as a number: 500m -> 0.5, 2Gi -> 2147483648; None if it is not one."""
    if isinstance(q, bool):
        return None
    if isinstance(q, (int, float)):
        return q
    m = QUANTITY.fullmatch(q) if isinstance(q, str) else None
    if not m:
        return None
    suffix = m.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return float(q)
    return float(q[: len(q) - len(suffix)]) * _SUFFIX[suffix]


_schemas = {}


def schema(name):
    """({JSON key: type}, {required JSON keys}) of a model or of an EXTRA_SCHEMAS type."""
    if name in _schemas:
        return _schemas[name]
    if name in EXTRA_SCHEMAS:
        result = EXTRA_SCHEMAS[name]
    else:
        cls = getattr(models, name)
        probe = cls.__new__(cls)  # the setters, without the constructor's checks
        probe.local_vars_configuration = Configuration()  # client_side_validation on
        fields, required = {}, set()
        for attr, typ in cls.openapi_types.items():
            key = cls.attribute_map[attr]
            fields[key] = QUANTITY_FIELDS.get((name, key), typ)
            try:
                setattr(probe, attr, None)
            except ValueError:  # "Invalid value for `x`, must not be `None`": a required field
                required.add(key)
        fields.update(EXTRA_FIELDS.get(name, {}))
        result = (fields, required)
    _schemas[name] = result
    return result


def _describe(value):
    return "null" if value is None else type(value).__name__


def check(value, typ, path, errors):
    """Appends (path, message) to errors for each way value is not of type typ."""
    def wrong(expected):
        errors.append((path, "expected %s, got %s %r" % (expected, _describe(value), value)))

    if typ == "str":
        if not isinstance(value, str):
            wrong("a string")
    elif typ == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            wrong("an integer")
    elif typ == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            wrong("a number")
    elif typ == "bool":
        if not isinstance(value, bool):
            wrong("true or false")
    elif typ == "datetime":
        if not isinstance(value, str):
            wrong("an RFC 3339 time")
    elif typ == INT_OR_STRING:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            wrong("an integer or a string")
    elif typ == "quantity":
        if quantity_value(value) is None:
            wrong("a quantity (1, 500m, 50Gi)")
    elif typ.startswith("list["):
        if not isinstance(value, list):
            return wrong("a list")
        for i, item in enumerate(value):
            check(item, typ[5:-1], "%s[%d]" % (path, i), errors)
    elif typ.startswith("dict(str, "):
        if not isinstance(value, dict):
            return wrong("a map")
        for k, v in value.items():
            if not isinstance(k, str):
                errors.append((path, "key %r is not a string" % (k,)))
            check(v, typ[10:-1], "%s.%s" % (path, k), errors)
    else:
        if not isinstance(value, dict):
            return wrong("an object (%s)" % typ)
        fields, required = schema(typ)
        for key, v in value.items():
            where = "%s.%s" % (path, key) if path else str(key)
            if key not in fields:
                near = difflib.get_close_matches(str(key), fields, n=1)
                errors.append((where, "unknown field of %s%s" % (typ, " (did you mean %s?)" % near[0] if near else "")))
            elif v is not None:  # null is the field left out, as the API server reads it
                check(v, fields[key], where, errors)
        for key in sorted(required):
            if value.get(key) is None:
                errors.append(("%s.%s" % (path, key) if path else key, "required field missing (%s)" % typ))


def validate(obj):
    """[(path, message)] for obj, a whole object with apiVersion and kind; [] when it checks out."""
    if not isinstance(obj, dict):
        return [("", "expected an object, got %s" % _describe(obj))]
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in KINDS:
        return [("", "no schema for apiVersion %r kind %r (known: %s)"
                 % (key[0], key[1], ", ".join("%s %s" % k for k in sorted(KINDS))))]
    errors = []
    check(obj, KINDS[key], "", errors)
    return errors
