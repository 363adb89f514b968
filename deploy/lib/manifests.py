#!/usr/bin/env python3
"""The checks of deploy/check for the Kubernetes manifests and the Dockerfile.

Usage: manifests.py OUT_DIR

Run by deploy/check with the Python of the virtual environment scripts/install-deps makes
(.cache/deploy-venv: pykustomize, kubernetes-validate, jsonschema, PyYAML). Writes each rendering
to OUT_DIR/<name>.yaml and checks, for the base and every overlay:

1. it renders with kustomize (pykustomize: the kustomize Go API built into the package, no
   kustomize binary needed); where a `kubectl` with kustomize v5 is on PATH, its rendering has
   the same objects;
2. every object validates, strictly (unknown fields are errors), against the Kubernetes schemas
   of the oldest and newest versions in K8S_VERSIONS (kubernetes-validate), the ServiceMonitor
   and PrometheusRule against the Prometheus Operator's CRD schemas in
   deploy/kubernetes/schemas/; plus rules the API server enforces that no schema states
   (privileged with allowPrivilegeEscalation false, hostPort = containerPort with hostNetwork,
   extended resources with requests = limits, object names);
3. what the deployment relies on (docs/deploy.md): NODE_NAME from spec.nodeName, hostNetwork
   with ClusterFirstWithHostNet, only IPC_LOCK, non-root and a read-only root file system, the
   probes on the HTTP endpoints the exporter serves, the ports and paths of the config, the
   Secret and the image, a RollingUpdate with maxUnavailable, the priority class, requests and
   limits, the node affinity and GPU tolerations, the Service and ServiceMonitor that select
   them, and per overlay its device access (hostPath /dev/infiniband with a read-only /sys, or
   the device plugin's resource and nothing from the host);
4. no drift: the PrometheusRule holds exactly the groups of deploy/prometheus/rules.yaml, the
   dashboards ConfigMap exactly dashboards/*.json, the config ConfigMap exactly
   deploy/kubernetes/base/config.yaml, the image tag is Cargo.toml's version;
5. the Dockerfile agrees with the rest (its debug stage is the runtime one with
   deploy/image/debug-packages, as the same user): its runtime stage runs deploy/image/setup-runtime and
   install-binary (which deploy/image/build-rootfs runs too) on the suite build-rootfs uses, its
   user is the DaemonSet's, its ports the container's, its default command the DaemonSet's, its
   Rust at least Cargo.toml's rust-version, its build packages those of scripts/install-deps.
"""

import asyncio
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from pykustomize import build

ROOT = Path(__file__).resolve().parent.parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
RENDERINGS = {
    "base": KUBE / "base",
    "hostpath": KUBE / "overlays" / "hostpath",
    "device-plugin": KUBE / "overlays" / "device-plugin",
}
# The oldest Kubernetes the manifests support (recursiveReadOnly needs 1.30) and the newest
# kubernetes-validate knows.
K8S_VERSIONS = ("1.30.0", "1.37.0")
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}
DEVICE_PLUGIN_RESOURCE = "rdma/hca_shared_devices_a"
CLUSTER_SCOPED = {"Namespace", "PriorityClass"}
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

failures = []


def fail(where, message):
    failures.append(f"{where}: {message}")


def check(condition, where, message):
    if not condition:
        fail(where, message)
    return condition


# ----------------------------------------------------------------------------------------------
# 1. Rendering


def render(directory):
    return asyncio.run(build(str(directory))).yaml


def documents(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def key(obj):
    meta = obj.get("metadata", {})
    return (obj.get("kind"), meta.get("namespace", ""), meta.get("name"))


def kubectl_kustomize_version():
    """The major version of kubectl's kustomize, or None without a kubectl."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    try:
        out = subprocess.run(
            [kubectl, "version", "--client"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Kustomize Version: v(\d+)", out)
    return int(m.group(1)) if m else None


def cross_check_with_kubectl(name, directory, objects):
    out = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    if not check(out.returncode == 0, name, f"kubectl kustomize failed: {out.stderr.strip()}"):
        return
    theirs = {key(o): o for o in documents(out.stdout)}
    ours = {key(o): o for o in objects}
    check(theirs == ours, name, "kubectl kustomize renders other objects than pykustomize")


# ----------------------------------------------------------------------------------------------
# 2. Schemas, and what the API server checks besides


def crd_schema(filename):
    crd = yaml.safe_load((KUBE / "schemas" / filename).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return strict(version["schema"]["openAPIV3Schema"])


def strict(schema):
    """The schema with unknown fields refused wherever it lists the fields (the API server
    prunes them silently, so a typo would vanish without a word)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    # metadata is ObjectMeta, which the CRD schema leaves open: kubernetes-validate checks it
    # on the core objects; here its usual fields are allowed.
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def validate_schema(where, obj, crd_schemas):
    api_kind = (obj.get("apiVersion"), obj.get("kind"))
    if api_kind in CRDS:
        validator = jsonschema.Draft7Validator(crd_schemas[api_kind])
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
            path = ".".join(str(p) for p in error.path)
            fail(where, f"{api_kind[1]} schema: {path}: {error.message}")
        return
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            fail(where, f"Kubernetes {version} schema: {path}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError:
            fail(where, f"no Kubernetes {version} schema for {api_kind}")


def pod_spec(obj):
    return obj.get("spec", {}).get("template", {}).get("spec")


def api_server_rules(where, obj):
    meta = obj.get("metadata", {})
    name = meta.get("name", "")
    pattern = DNS1123_LABEL if obj.get("kind") in ("Namespace", "Service") else DNS1123_SUBDOMAIN
    check(bool(pattern.match(name)) and len(name) <= 63, where, f"invalid name {name!r}")
    if obj.get("kind") == "ConfigMap":
        size = sum(len(v.encode()) for v in obj.get("data", {}).values())
        check(size < 1 << 20, where, f"data is {size} bytes; a ConfigMap holds at most 1 MiB")
    spec = pod_spec(obj)
    if not spec:
        return
    for c in spec.get("containers", []):
        cw = f"{where} container {c.get('name')}"
        sc = c.get("securityContext", {})
        check(
            not (sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False),
            cw,
            "privileged with allowPrivilegeEscalation false is refused by the API server",
        )
        if spec.get("hostNetwork"):
            for p in c.get("ports", []):
                check(
                    p.get("hostPort", p["containerPort"]) == p["containerPort"],
                    cw,
                    f"port {p.get('name')}: with hostNetwork, hostPort must equal containerPort",
                )
        resources = c.get("resources", {})
        for r, v in resources.get("limits", {}).items():
            if "/" in r and not r.startswith("kubernetes.io/"):
                check(
                    resources.get("requests", {}).get(r, v) == v,
                    cw,
                    f"extended resource {r}: requests must equal limits",
                )
        for m in c.get("volumeMounts", []):
            if m.get("recursiveReadOnly") in ("IfPossible", "Enabled"):
                check(m.get("readOnly") is True, cw, f"{m['mountPath']}: recursiveReadOnly needs readOnly")


# ----------------------------------------------------------------------------------------------
# 3. What the deployment relies on


def parse_quantity(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    return float(m.group(1)) * units[m.group(2)]


def http_routes():
    """The paths the exporter's admin server routes (src/http/mod.rs)."""
    source = (ROOT / "src" / "http" / "mod.rs").read_text()
    return set(re.findall(r'\.route\("([^"]+)"', source))


def config_listen(config_text):
    """The config's servers, each as (host, port): `listen`'s, or the defaults where absent."""
    listen = yaml.safe_load(config_text).get("listen") or {}
    servers = {"metrics": "0.0.0.0:9587", "control": "0.0.0.0:18516"}
    servers.update({f: str(listen[f]) for f in servers if f in listen})
    out = {}
    for field, address in servers.items():
        host, port = address.rsplit(":", 1)
        out[field] = (host, int(port))
    return out


def by_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def one(objects, kind, where):
    found = by_kind(objects, kind)
    check(len(found) == 1, where, f"{len(found)} objects of kind {kind}, expected 1")
    return found[0] if found else None


def check_deployment(name, objects, dockerfile):
    where = name
    ds = one(objects, "DaemonSet", where)
    if ds is None:
        return
    w = f"{name} DaemonSet"
    spec = pod_spec(ds)
    namespaces = {o["metadata"]["name"] for o in by_kind(objects, "Namespace")}
    check(len(namespaces) == 1, where, f"namespaces {sorted(namespaces)}, expected one")
    for o in objects:
        if o["kind"] not in CLUSTER_SCOPED:
            check(
                o["metadata"].get("namespace") in namespaces,
                where,
                f"{o['kind']} {o['metadata']['name']} is not in the rendered namespace",
            )
    for ns in by_kind(objects, "Namespace"):
        labels = ns["metadata"].get("labels", {})
        check(
            labels.get("pod-security.kubernetes.io/enforce") == "privileged",
            where,
            "the Namespace must allow hostNetwork and IPC_LOCK (pod-security enforce: privileged)",
        )
        for mode in ("warn", "audit"):
            check(
                labels.get(f"pod-security.kubernetes.io/{mode}") == "baseline",
                where,
                f"the Namespace must {mode} on pods beyond the baseline standard "
                f"(pod-security {mode}: baseline)",
            )

    strategy = ds["spec"].get("updateStrategy", {})
    check(strategy.get("type") == "RollingUpdate", w, "updateStrategy is not RollingUpdate")
    check("maxUnavailable" in strategy.get("rollingUpdate", {}), w, "no rollingUpdate.maxUnavailable")
    check(spec.get("hostNetwork") is True, w, "hostNetwork is not true")
    check(spec.get("dnsPolicy") == "ClusterFirstWithHostNet", w, "dnsPolicy is not ClusterFirstWithHostNet")
    check(spec.get("automountServiceAccountToken") is False, w, "a service account token is mounted")
    priority = spec.get("priorityClassName")
    check(
        priority in {p["metadata"]["name"] for p in by_kind(objects, "PriorityClass")},
        w,
        f"priorityClassName {priority!r} is not a rendered PriorityClass",
    )
    terms = (
        spec.get("affinity", {}).get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    )
    check(bool(terms), w, "no required node affinity for RDMA nodes")
    tolerated = {t.get("key") for t in spec.get("tolerations", [])}
    check("nvidia.com/gpu" in tolerated, w, "GPU nodes' taint nvidia.com/gpu is not tolerated")
    pod_sc = spec.get("securityContext", {})
    check(pod_sc.get("runAsNonRoot") is True, w, "runAsNonRoot is not true")
    check(pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", w, "no RuntimeDefault seccomp")

    (c,) = [c for c in spec["containers"] if c["name"] == "exporter"] or [None]
    if not check(c is not None and len(spec["containers"]) == 1, w, "expected one container, exporter"):
        return
    env = {e["name"]: e for e in c.get("env", [])}
    check(
        env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
        w,
        "NODE_NAME does not come from spec.nodeName",
    )
    check(
        env.get("HOST_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.hostIP",
        w,
        "HOST_IP does not come from status.hostIP",
    )
    sc = c.get("securityContext", {})
    caps = sc.get("capabilities", {})
    check(caps.get("drop") == ["ALL"], w, "capabilities: drop is not [ALL]")
    check(caps.get("add") == ["IPC_LOCK"], w, "capabilities: add is not exactly [IPC_LOCK]")
    check(sc.get("readOnlyRootFilesystem") is True, w, "the root file system is not read-only")

    routes = http_routes()
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path, w, f"{probe} is not an HTTP GET of {path}")
        check(get.get("path") in routes, w, f"{probe}: the exporter serves no {get.get('path')}")
        check(get.get("port") == "metrics", w, f"{probe} is not on the metrics port")

    resources = c.get("resources", {})
    cpu_request = resources.get("requests", {}).get("cpu")
    if check(cpu_request is not None, w, "cpu: no request"):
        check(parse_quantity(cpu_request) >= 1, w, "cpu: request below one core (a burst needs one)")
    check("cpu" not in resources.get("limits", {}), w, "cpu: a limit (a CFS quota pauses bursts)")
    request = resources.get("requests", {}).get("memory")
    limit = resources.get("limits", {}).get("memory")
    if check(request is not None and limit is not None, w, "memory: no request or no limit"):
        check(parse_quantity(limit) == parse_quantity(request), w, "memory: limit is not the request")

    # The config: mounted where the args say, its ports the container's, its key the Secret's.
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    args = c.get("args", [])
    config_path = args[args.index("--config") + 1] if "--config" in args else None
    check(args[:1] == ["run"] and config_path, w, f"args {args}: not `run --config FILE`")
    config_maps = {m["metadata"]["name"]: m for m in by_kind(objects, "ConfigMap")}
    config_text = None
    for vname, volume in volumes.items():
        if "configMap" in volume and vname in mounts and config_path:
            directory = mounts[vname]["mountPath"].rstrip("/") + "/"
            if config_path.startswith(directory):
                cm = config_maps.get(volume["configMap"]["name"])
                if check(cm is not None, w, f"volume {vname}: no ConfigMap {volume['configMap']['name']}"):
                    config_text = cm.get("data", {}).get(config_path[len(directory):])
                check("subPath" not in mounts[vname], w, "the config is mounted with subPath (never updated)")
    if not check(config_text is not None, w, f"{config_path} is not a key of a mounted ConfigMap"):
        return
    check(
        config_text == (KUBE / "base" / "config.yaml").read_text(),
        w,
        "the config ConfigMap differs from deploy/kubernetes/base/config.yaml",
    )
    listen = config_listen(config_text)
    check({f: port for f, (_, port) in listen.items()} == ports, w,
          f"container ports {ports} are not the config's listen ports")
    check({host for host, _ in listen.values()} == {"${HOST_IP}"}, w,
          "the config's listen addresses are not the node's own (${HOST_IP}): a host-network pod "
          "listening on 0.0.0.0 serves every address of the host")
    psk = (yaml.safe_load(config_text).get("auth") or {}).get("psk_file", "")
    secret_mounts = [
        mounts[n]["mountPath"].rstrip("/") + "/" + "psk"
        for n, v in volumes.items()
        if "secret" in v and n in mounts
    ]
    check(psk in secret_mounts, w, f"auth.psk_file {psk} is not the key `psk` of a mounted Secret")
    for n, v in volumes.items():
        if "secret" in v:
            # The kubelet adds group read for fsGroup; the exporter accepts that for a root-owned file.
            check(v["secret"].get("defaultMode") == 0o400, w, "the Secret's files are not mode 0400")
            check(pod_sc.get("fsGroup") == pod_sc.get("runAsGroup"), w, "fsGroup is not the exporter's group")

    image = c.get("image", "")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    check(image.rsplit(":", 1)[-1] == version, w, f"image {image}: the tag is not Cargo.toml's version {version}")

    # The image: its user, ports and default command are the DaemonSet's.
    if dockerfile:
        check(
            dockerfile["user"] == f"{pod_sc.get('runAsUser')}:{pod_sc.get('runAsGroup')}",
            w,
            f"the Dockerfile's USER {dockerfile['user']} is not runAsUser:runAsGroup",
        )
        check(sorted(dockerfile["expose"]) == sorted(ports.values()), w, "the Dockerfile's EXPOSE differs")
        check(dockerfile["cmd"] == args, w, f"the Dockerfile's CMD {dockerfile['cmd']} is not the args {args}")

    # The Service and the ServiceMonitor select the pods and their metrics port.
    pod_labels = ds["spec"]["template"]["metadata"].get("labels", {})
    svc = one(objects, "Service", where)
    if svc:
        s = svc["spec"]
        check(s.get("clusterIP") == "None", where, "the Service is not headless")
        check(s.get("publishNotReadyAddresses") is True, where, "the Service hides not-ready exporters")
        check(
            s.get("selector") and s["selector"].items() <= pod_labels.items(),
            where,
            "the Service does not select the DaemonSet's pods",
        )
        for p in s.get("ports", []):
            check(p.get("targetPort") in ports, where, f"Service port {p.get('name')}: no such container port")
    monitor = one(objects, "ServiceMonitor", where)
    if monitor and svc:
        labels = svc["metadata"].get("labels", {})
        check(
            monitor["spec"]["selector"].get("matchLabels", {}).items() <= labels.items(),
            where,
            "the ServiceMonitor does not select the Service",
        )
        svc_ports = {p["name"] for p in svc["spec"]["ports"]}
        for e in monitor["spec"].get("endpoints", []):
            check(e.get("port") in svc_ports, where, f"ServiceMonitor endpoint port {e.get('port')}: not the Service's")
            check(
                any(
                    r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
                    and r.get("targetLabel") == "instance"
                    for r in e.get("relabelings", [])
                ),
                where,
                "the ServiceMonitor does not set instance to the node's name",
            )
            check(
                any(r.get("action") == "labeldrop" and r.get("regex") == "pod" for r in e.get("relabelings", [])),
                where,
                "the ServiceMonitor keeps the pod label (a rollout would replace every series)",
            )
        check(svc["metadata"]["name"] == "rdma-probe-exporter", where, "the job (the Service's name) is not rdma-probe-exporter")

    # Device access, per overlay.
    host_paths = {v["hostPath"]["path"]: n for n, v in volumes.items() if "hostPath" in v}
    limits = c.get("resources", {}).get("limits", {})
    if name == "hostpath":
        dev = host_paths.get("/dev/infiniband")
        check(dev is not None and mounts.get(dev, {}).get("mountPath") == "/dev/infiniband", w, "no hostPath /dev/infiniband")
        check(sc.get("privileged") is True, w, "a hostPath device needs privileged (the device cgroup)")
        sys_mount = mounts.get(host_paths.get("/sys"), {})
        check(
            sys_mount.get("mountPath") == "/sys" and sys_mount.get("readOnly") is True,
            w,
            "a privileged container's /sys is writable: mount the host's read-only",
        )
    elif name == "device-plugin":
        check(DEVICE_PLUGIN_RESOURCE in limits, w, f"no {DEVICE_PLUGIN_RESOURCE} limit")
        check(not host_paths, w, f"hostPath volumes {sorted(host_paths)} with the device plugin")
        check(not sc.get("privileged"), w, "privileged with the device plugin")
    else:
        check(not host_paths and not sc.get("privileged"), w, "the base grants device access")


# ----------------------------------------------------------------------------------------------
# 4. Drift


def check_drift(name, objects):
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text())
    rule = one(objects, "PrometheusRule", name)
    if rule:
        check(rule["spec"] == rules, name, "the PrometheusRule's groups differ from deploy/prometheus/rules.yaml")
    dashboards = {f.name: f.read_text() for f in sorted((ROOT / "dashboards").glob("*.json"))}
    held = [
        cm for cm in by_kind(objects, "ConfigMap")
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    if check(len(held) == 1, name, f"{len(held)} dashboard ConfigMaps, expected 1"):
        data = held[0].get("data", {})
        check(sorted(data) == sorted(dashboards), name, f"dashboards ConfigMap keys {sorted(data)} are not dashboards/*.json")
        for f, text in dashboards.items():
            check(data.get(f) == text, name, f"the dashboards ConfigMap's {f} differs from dashboards/{f}")
            try:
                json.loads(data.get(f, ""))
            except ValueError as error:
                fail(name, f"the dashboards ConfigMap's {f} is not JSON: {error}")


# ----------------------------------------------------------------------------------------------
# 5. The Dockerfile


def dockerfile_facts():
    """USER, EXPOSE, CMD of the final stage and the facts checked against the other sources;
    records a failure for anything missing."""
    where = "Dockerfile"
    text = (ROOT / "Dockerfile").read_text()
    instructions = []
    current = ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        instructions.append((word.upper(), rest.strip()))
        current = ""
    args = {}
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v

    def expand(s):
        return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), s)

    stages = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    if not check(len(stages) >= 2, where, "not multi-stage (a build stage and a runtime stage)"):
        return None
    named = {}
    for n, i in enumerate(stages):
        words = instructions[i][1].split()
        if len(words) == 3 and words[1].upper() == "AS":
            named[words[2]] = instructions[i:stages[n + 1] if n + 1 < len(stages) else len(instructions)]
    # The image a plain `docker build` makes: the last stage, or the named stage it only repeats.
    final = instructions[stages[-1]:]
    while len(final) == 1 and final[0][1].split()[0] in named:
        final = named[final[0][1].split()[0]]
    build_stage = instructions[stages[0]:stages[1]]
    base = expand(final[0][1].split()[0])
    rootfs = (ROOT / "deploy" / "image" / "build-rootfs").read_text()
    suite = re.search(r"^suite=(\w+)", rootfs, re.M).group(1)
    check(base == f"debian:{suite}-slim", where, f"runtime base {base} is not debian:{suite}-slim (build-rootfs' suite)")
    check(expand(build_stage[0][1]).split()[0].endswith(f"-{suite}"), where, f"the build stage is not on {suite} (glibc of the runtime)")
    runs = " ".join(rest for word, rest in final if word == "RUN")
    for script in ("setup-runtime", "install-binary"):
        check(f"/mnt/image/{script}" in runs, where, f"the runtime stage does not run deploy/image/{script}")
        check(script in rootfs, where, f"deploy/image/build-rootfs does not run {script}")
    build_runs = " ".join(rest for word, rest in build_stage if word == "RUN")
    check("cargo build --release --locked --bin rdma-probe-exporter" in build_runs, where, "no locked release build")
    check("strip --strip-debug" in build_runs and "strip --strip-debug" in rootfs, where, "the binary is not stripped alike")
    install_deps = (ROOT / "scripts" / "install-deps").read_text()
    wanted = re.search(r"^BUILD_PACKAGES=\(([^)]*)\)", install_deps, re.M).group(1).split()
    for package in ("cmake", "libclang-dev"):
        check(package in wanted, where, f"scripts/install-deps no longer installs {package}")
        check(re.search(rf"\b{re.escape(package)}\b", build_runs) is not None, where, f"the build stage lacks {package}")
    rust = tuple(int(x) for x in args.get("RUST_VERSION", "0").split("."))
    msrv = re.search(r'^rust-version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    check(rust >= tuple(int(x) for x in msrv.split(".")), where, f"RUST_VERSION {rust} is below rust-version {msrv}")
    # The debug image: the runtime one with debug-packages, as the same user.
    debug = named.get("debug")
    if check(debug is not None, where, "no debug stage (docker build --target debug)"):
        check(debug[0][1].split()[0] in named and named[debug[0][1].split()[0]] == final, where,
              "the debug stage is not built on the runtime stage")
        debug_runs = " ".join(rest for word, rest in debug if word == "RUN")
        check("/mnt/image/setup-runtime --packages /mnt/image/debug-packages" in debug_runs, where,
              "the debug stage does not install deploy/image/debug-packages with setup-runtime")
        users = [rest for word, rest in debug if word == "USER"]
        runtime_users = [rest for word, rest in final if word == "USER"]
        check(users[-1:] == runtime_users[-1:], where, "the debug stage does not end as the runtime's user")
    facts = {"user": None, "expose": [], "cmd": None}
    for word, rest in final:
        if word == "USER":
            facts["user"] = rest
        elif word == "EXPOSE":
            facts["expose"] = [int(p.split("/")[0]) for p in rest.split()]
        elif word == "CMD":
            facts["cmd"] = json.loads(rest)
        elif word == "ENTRYPOINT":
            check(json.loads(rest) == ["/usr/local/bin/rdma-probe-exporter"], where, "ENTRYPOINT is not the installed binary")
    return facts


# ----------------------------------------------------------------------------------------------


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    crd_schemas = {k: crd_schema(f) for k, f in CRDS.items()}
    dockerfile = dockerfile_facts()
    kubectl = kubectl_kustomize_version()
    summary = []
    for name, directory in RENDERINGS.items():
        try:
            text = render(directory)
        except Exception as error:  # pykustomize raises its own error types
            fail(name, f"kustomize build {directory.relative_to(ROOT)}: {error}")
            continue
        (out / f"{name}.yaml").write_text(text)
        objects = documents(text)
        if kubectl and kubectl >= 5:
            cross_check_with_kubectl(name, directory, objects)
        for obj in objects:
            where = f"{name} {obj.get('kind')} {obj.get('metadata', {}).get('name')}"
            validate_schema(where, obj, crd_schemas)
            api_server_rules(where, obj)
        check_deployment(name, objects, dockerfile)
        check_drift(name, objects)
        summary.append(f"{name} ({len(objects)} objects)")
    if failures:
        for f in failures:
            print(f"manifests: FAIL: {f}", file=sys.stderr)
        sys.exit(1)
    versions = " and ".join(K8S_VERSIONS)
    print(
        f"deploy/check: kustomize renders {', '.join(summary)}; every object valid against Kubernetes "
        f"{versions} (strict) or the Prometheus Operator CRDs; device access, security context, probes, "
        f"ports and paths as documented; rules, dashboards and config without drift; the Dockerfile agrees"
        + ("; kubectl kustomize renders the same" if kubectl and kubectl >= 5 else "")
    )


if __name__ == "__main__":
    main()
