# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its API may change in any release without notice, and other
# collections must not import it.
"""Checks of the values users set, by kind, each message naming the variable, its value and what is accepted.

The roles call them through the `input_errors` filter before they change anything: values the API server would
take (a registry with a trailing space, an image name that carries a tag) but a node could not use, and values
it would refuse with a 422 only once the first objects are applied. One kind per rule, so every role checks an
image, a name or a URL the same way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

# The distribution reference grammar (github.com/distribution/reference, regexp.go), written out.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
REPOSITORY = re.compile(rf"^{_NAME}$")
REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")
TAG = re.compile(rf"^(?:{_TAG}|{_DIGEST})$")
REGISTRY = re.compile(rf"^{_DOMAIN}(?:/{_PATH_COMPONENT})*$")
NAME_MAX = 255
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
URL = re.compile(r"^(?:https?://(?:[A-Za-z0-9._~%-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/\S*)?|file:///\S*)$")


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def image_repository(value: Any) -> str | None:
    """An image without its tag: registry host, path; the tag is another variable."""
    text = _text(value)
    if text is None or not text:
        return "is not an image name (registry/path, e.g. nvcr.io/nvidia/k8s-device-plugin)"
    match = REFERENCE.match(text)
    if match and (match.group("tag") or match.group("digest")) and REPOSITORY.match(match.group("name")):
        return (f"carries a tag or digest; give the image without it ({match.group('name')}) and the tag in the version "
                "variable")
    if not REPOSITORY.match(text) or len(text) > NAME_MAX:
        return ("is not an image name: lower-case path components separated by /, after an optional registry host "
                "(no spaces, no upper case, no scheme), e.g. nvcr.io/nvidia/k8s-device-plugin")
    return None


def image_tag(value: Any) -> str | None:
    text = _text(value)
    if text is None or not TAG.match(text):
        return "is not an image tag (letters, digits, _ . -, at most 128, not starting with . or -) or digest (sha256:<hex>)"
    return None


def image_reference(value: Any) -> str | None:
    """A whole image reference: name with a tag or a digest."""
    text = _text(value)
    match = REFERENCE.match(text or "")
    if text is None or not match or len(match.group("name")) > NAME_MAX:
        return ("is not an image reference (registry/path:tag or registry/path@sha256:<hex>, no spaces, "
                "lower-case path), e.g. nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04")
    if not (match.group("tag") or match.group("digest")):
        return "has no tag or digest; name the one to run (…:tag or …@sha256:<hex>)"
    return None


def registry(value: Any) -> str | None:
    text = _text(value)
    if text is None or not REGISTRY.match(text):
        return ("is not a registry (a host with an optional port and path, no scheme, no spaces, no trailing /), "
                "e.g. nvcr.io/nvidia or registry.example.com:5000/mirror/nvidia")
    return None


def dns_label(value: Any) -> str | None:
    text = _text(value)
    if text is None or not DNS_LABEL.match(text):
        return "is not a DNS-1123 label (lower-case letters, digits and -, at most 63, starting and ending alphanumeric)"
    return None


def dns_subdomain(value: Any) -> str | None:
    text = _text(value)
    if text is None or not DNS_SUBDOMAIN.match(text):
        return ("is not a DNS-1123 subdomain (lower-case letters, digits, - and ., at most 253, each part starting and "
                "ending alphanumeric)")
    return None


def port(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit() or not 1 <= int(value) <= 65535:
        return "is not a port (a whole number from 1 to 65535)"
    return None


def url(value: Any) -> str | None:
    text = _text(value)
    if text is None or not URL.match(text):
        return "is not a URL (http:// or https:// with a host, or file:/// with a path, no spaces)"
    return None


def kubeconfig(value: Any, context: Any = None) -> str | None:
    """A kubeconfig file on the controller, that parses, with the context asked for."""
    text = _text(value)
    if text is None or not text:
        return "is not a path"
    path = os.path.expanduser(text)
    if not os.path.exists(path):
        return "does not exist on the controller"
    if os.path.isdir(path):
        return "is a directory, not a kubeconfig file"
    try:
        import yaml  # the controller has it: ansible-core needs it

        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    except yaml.YAMLError as exc:
        return "does not parse as YAML ({})".format(str(exc).replace("\n", " "))
    if not isinstance(data, Mapping) or not isinstance(data.get("contexts"), list):
        return "is not a kubeconfig (no contexts list)"
    return None


def kube_contexts(path: str) -> list[str] | None:
    """The context names of a kubeconfig that parses, else None."""
    if kubeconfig(path) is not None:
        return None
    import yaml

    with open(os.path.expanduser(path), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    return [str(c.get("name")) for c in data["contexts"] if isinstance(c, Mapping)]


KINDS: dict[str, Callable[[Any], str | None]] = {
    "image_repository": image_repository, "image_tag": image_tag, "image_reference": image_reference,
    "registry": registry, "dns_label": dns_label, "dns_subdomain": dns_subdomain, "port": port, "url": url,
    "kubeconfig": kubeconfig,
}


def input_errors(checks: Any) -> list[str]:
    """Messages for the values that are not of their kind.

    `checks`: a mapping of variable name to [value, kind], or to [value, "kube_context", kubeconfig path] (the
    context must be in that kubeconfig; nothing is said when the kubeconfig cannot be read, as its own check says
    that). A value of None or "" is skipped for kubeconfig and kube_context (not set: the defaults apply).
    """
    errors: list[str] = []
    if not isinstance(checks, Mapping):
        raise TypeError("input_errors takes a mapping of variable name to [value, kind]")
    for variable, spec in checks.items():
        if not isinstance(spec, (list, tuple)) or len(spec) < 2:
            raise TypeError(f"input_errors: {variable}: expected [value, kind], got {spec!r}")
        value, kind = spec[0], spec[1]
        if kind in ("kubeconfig", "kube_context") and value in (None, ""):
            continue
        if kind == "kube_context":
            contexts = kube_contexts(str(spec[2])) if len(spec) > 2 and spec[2] else None
            if contexts is not None and value not in contexts:
                errors.append(f"{variable}: {_show(value)} is not a context of {spec[2]} (it has {', '.join(contexts) or 'none'})")
            continue
        if kind not in KINDS:
            raise TypeError(f"input_errors: {variable}: unknown kind {kind!r} (known: {', '.join(sorted(KINDS))}, kube_context)")
        problem = KINDS[kind](value)
        if problem:
            errors.append(f"{variable}: {_show(value)} {problem}")
    return errors
