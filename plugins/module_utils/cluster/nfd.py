# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node Feature Discovery as GFD needs it: whether an nfd-master already in the cluster would publish GFD's
labels. Pure functions over the objects read from the API server; no I/O.

GFD (use-node-feature-api, its default) writes one NodeFeature per node, `nvidia-features-for-<node>` in its
own namespace, with its labels in spec.labels; nfd-master turns them into node labels. nfd-master drops them
when its config says so (v0.19's nfd-master.go, filterFeatureLabel and the restrictions):
- a namespace in denyLabelNs (`*.suffix` entries match by suffix) that extraLabelNs does not allow again
  (only kubernetes.io namespaces are denied by default, so nvidia.com passes unless someone denies it);
- a labelWhiteList that GFD's label names (the part after the namespace) do not match;
- noPublish, restrictions.disableLabels or restrictions.denyNodeFeatureLabels;
- restrictions.nodeFeatureNamespaceSelector not matching GFD's namespace;
- a release before v0.14, where the NodeFeature API was not on by default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypedDict

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube_common import selector_matches

NVIDIA_NS = "nvidia.com"
# Label names GFD sets on every GPU node, for the whitelist check (the part after nvidia.com/).
GFD_LABEL_NAMES = ("gpu.product", "gpu.count", "gpu.memory", "gpu.family", "cuda.driver-version.major")
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"
CONFIG_FILE = "nfd-master.conf"
CRD = "nodefeatures.nfd.k8s-sigs.io"
_ARG = re.compile(r"^--?([a-z-]+)(?:=(.*))?$")
_VERSION = re.compile(r":v?(\d+)\.(\d+)(?:\.\d+)?(?:[-@].*)?$")


class Master(TypedDict):
    """An nfd-master found in the cluster: where, its image and its effective config."""

    namespace: str
    name: str
    image: str
    config: dict[str, Any]


def _container(deployment: dict) -> dict | None:
    for container in (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
        words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
        if any(w.rsplit("/", 1)[-1] == "nfd-master" for w in words):
            return container
    return None


def is_master(deployment: dict) -> bool:
    """Whether a Deployment runs nfd-master (its command or args name the binary)."""
    return _container(deployment) is not None


def _flags(words: list[str]) -> dict[str, str]:
    """-flag=value, -flag value and boolean -flag, as Go's flag package reads them."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        m = _ARG.match(words[i])
        if m:
            name, value = m.group(1), m.group(2)
            if value is None:
                nxt = words[i + 1] if i + 1 < len(words) else None
                if nxt is not None and not nxt.startswith("-") and name not in ("no-publish", "enable-taints", "prune",
                                                                                "enable-leader-election"):
                    value, i = nxt, i + 1
                else:
                    value = "true"
            out[name] = value
        i += 1
    return out


def _config_map_name(deployment: dict, container: dict, config_file: str) -> str | None:
    """The ConfigMap mounted where the config file is read from."""
    directory = config_file.rsplit("/", 1)[0]
    mounts = {m.get("name"): m.get("mountPath", "").rstrip("/") for m in container.get("volumeMounts") or []}
    for volume in (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []:
        if mounts.get(volume.get("name")) == directory and volume.get("configMap"):
            return str(volume["configMap"].get("name"))
    return None


def master(deployment: dict, configmaps: dict[str, dict], load: Callable[[str], Any]) -> Master:
    """The nfd-master of a Deployment: its config file (from the ConfigMap mounted for it, configmaps being
    name -> data of its namespace, read with load: a YAML loader) with the command-line overrides applied, as
    nfd-master applies them."""
    container = _container(deployment) or {}
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    flags = _flags([w for w in words if w.startswith("-") or not w.endswith("nfd-master")])
    config_file = flags.get("config", f"{CONFIG_DIR}/{CONFIG_FILE}")
    config: dict[str, Any] = {}
    cm = _config_map_name(deployment, container, config_file)
    if cm and cm in configmaps:
        text = (configmaps[cm] or {}).get(config_file.rsplit("/", 1)[-1])
        loaded = load(text) if text else None
        config = dict(loaded) if isinstance(loaded, dict) else {}
    for flag, key in (("extra-label-ns", "extraLabelNs"), ("deny-label-ns", "denyLabelNs")):
        if flag in flags:
            config[key] = [v for v in flags[flag].split(",") if v]
    if "label-whitelist" in flags:
        config["labelWhiteList"] = flags["label-whitelist"]
    if "no-publish" in flags:
        config["noPublish"] = flags["no-publish"].lower() in ("true", "1", "t")
    meta = deployment.get("metadata") or {}
    return {"namespace": str(meta.get("namespace", "")), "name": str(meta.get("name", "")),
            "image": str(container.get("image", "")), "config": config}


def drops_gfd_labels(found: Master, gfd_namespace_labels: dict[str, str]) -> list[str]:
    """Why this nfd-master would not publish GFD's labels; empty when it would."""
    where = f"nfd-master {found['namespace']}/{found['name']}"
    cfg = found["config"]
    reasons = []
    version = _VERSION.search(found["image"])
    if version and (int(version.group(1)), int(version.group(2))) < (0, 14):
        reasons.append(f"{where} runs {found['image']}: before v0.14 the NodeFeature API GFD writes to is not on by default")
    denied = [str(ns) for ns in cfg.get("denyLabelNs") or []]
    extra = {str(ns) for ns in cfg.get("extraLabelNs") or []}
    hit = [ns for ns in denied if ns == NVIDIA_NS or (ns.startswith("*") and NVIDIA_NS.endswith(ns.lstrip("*")))]
    if hit and NVIDIA_NS not in extra:
        reasons.append(f"{where} denies the {NVIDIA_NS} label namespace (denyLabelNs {hit}) and extraLabelNs does not "
                       f"allow it back; add {NVIDIA_NS} to its extraLabelNs")
    whitelist = cfg.get("labelWhiteList")
    if whitelist:
        try:
            pattern = re.compile(str(whitelist))
            missed = [n for n in GFD_LABEL_NAMES if not pattern.search(n)]
        except re.error:
            missed = []
        if missed:
            reasons.append(f"{where} publishes only labels matching labelWhiteList {whitelist!r}, which drops GFD's {missed}")
    if cfg.get("noPublish") is True:
        reasons.append(f"{where} runs with noPublish: it sets no labels")
    restrictions = cfg.get("restrictions") or {}
    for key in ("disableLabels", "denyNodeFeatureLabels"):
        if restrictions.get(key) is True:
            reasons.append(f"{where} has restrictions.{key}: labels from NodeFeature objects are not published")
    selector = restrictions.get("nodeFeatureNamespaceSelector")
    if selector and not selector_matches(selector, gfd_namespace_labels):
        reasons.append(f"{where} reads NodeFeature objects only from namespaces matching {selector}, which GFD's "
                       f"namespace (labels {gfd_namespace_labels}) does not")
    return reasons
