"""A structural check of Kubernetes objects against the API's schema, for the kinds and fields
`yeto-host launch` writes (core/v1 Service, Secret, ConfigMap; batch/v1 Job with its pod
template), the way the API server's strict field validation and its validators read them:

- every field is a field of the object's type (an unknown or misspelt field is an error, as
  `kubectl apply --validate=strict` makes it), with the type the API declares (a string where a
  string is declared: an env value `29500` must be quoted; an integer where int32 is declared);
- required fields are present (metadata.name, a container's name and image, a port's number,
  a volume mount's path, a claim's name, the Job's template and containers);
- enumerations hold (restartPolicy, completionMode, protocol, Service type) and the Job rules:
  restartPolicy Never or OnFailure, an Indexed Job declares completions;
- names, label keys and values have the API's syntax (DNS-1123 labels and subdomains,
  qualified names, label values of at most 63 characters), ports are 1-65535 and file modes
  0-0777, resource quantities are numbers or quantity strings.

Fields outside this subset are reported as unknown: a manifest that needs one extends the
schema here, from the API reference, in the same change.
"""
import re

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def _dns_label(v):
    return isinstance(v, str) and len(v) <= 63 and DNS_LABEL.match(v) is not None


def _dns_subdomain(v):
    return isinstance(v, str) and len(v) <= 253 and DNS_SUBDOMAIN.match(v) is not None


def _label_key(k):
    if not isinstance(k, str):
        return False
    prefix, _, name = k.rpartition("/")
    if prefix and not _dns_subdomain(prefix):
        return False
    return len(name) <= 63 and QUALIFIED_NAME.match(name) is not None


def _label_value(v):
    return isinstance(v, str) and len(v) <= 63 and (v == "" or QUALIFIED_NAME.match(v) is not None)


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _port(v):
    return _int(v) and 1 <= v <= 65535


def _quantity(v):
    return _int(v) or (isinstance(v, float)) or (isinstance(v, str) and QUANTITY.match(v) is not None)


# Scalar checks: (predicate, what the API expects).
STRING = (lambda v: isinstance(v, str), "a string")
BOOL = (lambda v: isinstance(v, bool), "a boolean")
INT32 = (lambda v: _int(v) and -(2 ** 31) <= v < 2 ** 31, "an integer")
NONNEG = (lambda v: _int(v) and 0 <= v < 2 ** 31, "a non-negative integer")
PORT = (_port, "a port number 1-65535")
INT_OR_STRING = (lambda v: _port(v) or (isinstance(v, str) and _dns_label(v)), "a port number or a port name")
MODE = (lambda v: _int(v) and 0 <= v <= 0o777, "a file mode 0-0777")
DNS1123_LABEL = (_dns_label, "a DNS-1123 label (lower-case alphanumerics and '-', at most 63)")
DNS1123_SUBDOMAIN = (_dns_subdomain, "a DNS-1123 subdomain")


def enum(*values):
    return (lambda v: v in values, "one of " + ", ".join(values))


def string_map(key_check=None, value_check=None):
    return {"map": (key_check or STRING, value_check or STRING)}


LABELS = string_map((_label_key, "a label key (an optional DNS prefix and '/', a qualified name)"),
                    (_label_value, "a label value (at most 63 characters, alphanumerics, '-', '_', '.')"))
QUANTITY_MAP = string_map((_label_key, "a resource name"), (_quantity, "a quantity (a number or a string like 16Gi)"))


def obj(fields, required=()):
    return {"fields": fields, "required": tuple(required)}


def list_of(t):
    return {"list": t}


OBJECT_META = obj({"name": DNS1123_SUBDOMAIN, "generateName": STRING, "namespace": DNS1123_LABEL, "labels": LABELS,
                   "annotations": string_map()})
KEY_TO_PATH = obj({"key": STRING, "path": STRING, "mode": MODE}, ["key", "path"])
VOLUME = obj({
    "name": DNS1123_LABEL,
    "secret": obj({"secretName": DNS1123_SUBDOMAIN, "defaultMode": MODE, "items": list_of(KEY_TO_PATH),
                   "optional": BOOL}),
    "configMap": obj({"name": DNS1123_SUBDOMAIN, "defaultMode": MODE, "items": list_of(KEY_TO_PATH),
                      "optional": BOOL}),
    "persistentVolumeClaim": obj({"claimName": DNS1123_SUBDOMAIN, "readOnly": BOOL}, ["claimName"]),
    "emptyDir": obj({"medium": enum("", "Memory"), "sizeLimit": (_quantity, "a quantity")}),
}, ["name"])
ENV_VAR = obj({"name": STRING, "value": STRING}, ["name"])
CONTAINER_PORT = obj({"containerPort": PORT, "name": (lambda v: _dns_label(v) and len(v) <= 15, "a port name"),
                      "protocol": enum("TCP", "UDP", "SCTP"), "hostPort": PORT}, ["containerPort"])
VOLUME_MOUNT = obj({"name": STRING, "mountPath": STRING, "readOnly": BOOL, "subPath": STRING},
                   ["name", "mountPath"])
CONTAINER = obj({
    "name": DNS1123_LABEL, "image": STRING, "command": list_of(STRING), "args": list_of(STRING),
    "workingDir": STRING, "env": list_of(ENV_VAR), "ports": list_of(CONTAINER_PORT),
    "resources": obj({"limits": QUANTITY_MAP, "requests": QUANTITY_MAP}),
    "volumeMounts": list_of(VOLUME_MOUNT), "imagePullPolicy": enum("Always", "IfNotPresent", "Never"),
}, ["name", "image"])
TOLERATION = obj({"key": STRING, "operator": enum("Exists", "Equal"), "value": STRING,
                  "effect": enum("NoSchedule", "PreferNoSchedule", "NoExecute"), "tolerationSeconds": INT32})
POD_SPEC = obj({
    "containers": list_of(CONTAINER), "restartPolicy": enum("Always", "OnFailure", "Never"),
    "subdomain": DNS1123_LABEL, "hostname": DNS1123_LABEL, "nodeSelector": LABELS, "volumes": list_of(VOLUME),
    "tolerations": list_of(TOLERATION), "serviceAccountName": DNS1123_SUBDOMAIN,
    "terminationGracePeriodSeconds": NONNEG,
}, ["containers"])
POD_TEMPLATE = obj({"metadata": OBJECT_META, "spec": POD_SPEC}, ["spec"])
JOB_SPEC = obj({
    "template": POD_TEMPLATE, "completions": NONNEG, "parallelism": NONNEG, "backoffLimit": NONNEG,
    "completionMode": enum("NonIndexed", "Indexed"), "suspend": BOOL, "activeDeadlineSeconds": NONNEG,
    "ttlSecondsAfterFinished": NONNEG,
}, ["template"])
SERVICE_PORT = obj({"name": DNS1123_LABEL, "port": PORT, "targetPort": INT_OR_STRING,
                    "protocol": enum("TCP", "UDP", "SCTP"), "appProtocol": STRING}, ["port"])
SERVICE_SPEC = obj({"clusterIP": STRING, "ports": list_of(SERVICE_PORT), "selector": LABELS,
                    "type": enum("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"),
                    "publishNotReadyAddresses": BOOL})

KINDS = {
    ("v1", "Service"): obj({"apiVersion": STRING, "kind": STRING, "metadata": OBJECT_META, "spec": SERVICE_SPEC},
                           ["metadata"]),
    ("v1", "Secret"): obj({"apiVersion": STRING, "kind": STRING, "metadata": OBJECT_META, "type": STRING,
                           "data": string_map(), "stringData": string_map(), "immutable": BOOL}, ["metadata"]),
    ("v1", "ConfigMap"): obj({"apiVersion": STRING, "kind": STRING, "metadata": OBJECT_META, "data": string_map(),
                              "immutable": BOOL}, ["metadata"]),
    ("batch/v1", "Job"): obj({"apiVersion": STRING, "kind": STRING, "metadata": OBJECT_META, "spec": JOB_SPEC},
                             ["metadata", "spec"]),
}


def _check(value, schema, path, errors):
    if isinstance(schema, tuple):
        pred, what = schema
        if not pred(value):
            errors.append(f"{path}: {value!r} is not {what}")
        return
    if "map" in schema:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        kc, vc = schema["map"]
        for k, v in value.items():
            _check(k, kc, f"{path} key", errors)
            _check(v, vc, f"{path}.{k}", errors)
        return
    if "list" in schema:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, v in enumerate(value):
            _check(v, schema["list"], f"{path}[{i}]", errors)
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object")
        return
    for k, v in value.items():
        if k not in schema["fields"]:
            errors.append(f"{path}: unknown field '{k}'")
        else:
            _check(v, schema["fields"][k], f"{path}.{k}", errors)
    for k in schema["required"]:
        if k not in value:
            errors.append(f"{path}: required field '{k}' is missing")


def validate(doc):
    """Returns the list of errors of one object (empty: valid)."""
    if not isinstance(doc, dict):
        return ["the document is not an object"]
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [f"{key[0]}/{key[1]}: not a kind this schema knows"]
    errors = []
    where = f"{key[1]} {doc.get('metadata', {}).get('name', '?')}"
    _check(doc, KINDS[key], where, errors)
    if "name" not in doc.get("metadata", {}):
        errors.append(f"{where}: metadata.name is required")
    if key[1] == "Service" and not _dns_label(doc.get("metadata", {}).get("name")):
        errors.append(f"{where}: a Service name must be a DNS-1123 label")
    if key[1] == "Job":
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            errors.append(f"{where}: a Job's pods need restartPolicy Never or OnFailure")
        if spec.get("completionMode") == "Indexed" and "completions" not in spec:
            errors.append(f"{where}: an Indexed Job needs completions")
        if not pod.get("containers"):
            errors.append(f"{where}: a pod needs at least one container")
        # The Job controller labels its pods job-name=<name>: the name must be a label value.
        if not _label_value(doc.get("metadata", {}).get("name", "")):
            errors.append(f"{where}: a Job name must fit a label value (at most 63 characters)")
    return errors
