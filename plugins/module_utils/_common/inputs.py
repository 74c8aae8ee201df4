# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its API may change in any release without notice, and other
# collections must not import it.
"""Checks of the values users set, by kind, each message naming the variable, its value and what is accepted.

Values the API server would take (a registry with a trailing space, an image name that carries a tag) but a node
could not use, and values it would refuse with a 422 only once the first objects are applied. One kind per rule, so
every role checks an image, a name or a URL the same way.

Each role declares what kind each of its variables is, and the checks across variables, in its `meta/inputs.yml`
(what its argument spec cannot say); `declared_errors` computes the messages of such a declaration, on the
controller (the role_inputs action, which resolves the rules of module_utils/cluster/inputs.py and
module_utils/node/inputs.py). The `input_errors` filter checks values by the same kinds.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

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


# Kinds whose messages say more than the value is not of the kind; their value is shown as text (as Jinja's string
# filter writes it), as the roles' own checks always showed it.
_PACKAGE_VERSION = re.compile(r"^([0-9]+[.][0-9]+[.][0-9]+(~[0-9A-Za-z.]+)?(-[0-9A-Za-z.+~]+)?)?$")
_GO_DURATION_OR_INFINITE = re.compile(r"^(infinite|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$")
_PROMETHEUS_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_RELEASE_TAG = re.compile(r"^v[0-9]+[.][0-9]+[.][0-9]+$")
_SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HTTP_OR_FILE_URL = re.compile(r"^(https?|file)://[^ ]+$")


def _matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.match(value) is not None


def package_version(value: Any) -> str | None:
    """A package's upstream version, with its revision or without (any revision), or empty (the newest)."""
    if not _matches(_PACKAGE_VERSION, value):
        return "is not a package version (1.18.2, or with its package revision, 1.18.2-1)"
    return None


def go_duration_or_infinite(value: Any) -> str | None:
    if not _matches(_GO_DURATION_OR_INFINITE, value):
        return "is not a Go duration such as 60s or 5m, nor infinite"
    return None


def prometheus_duration(value: Any) -> str | None:
    if not _matches(_PROMETHEUS_DURATION, value):
        return "is not a Prometheus duration such as 15s or 1m"
    return None


def prometheus_duration_or_empty(value: Any) -> str | None:
    if value != "" and not _matches(_PROMETHEUS_DURATION, value):
        return "is not a Prometheus duration such as 10s, nor empty"
    return None


def release_tag(value: Any) -> str | None:
    if not _matches(_RELEASE_TAG, value):
        return "is not a release such as v0.19.0"
    return None


def sha256_digest(value: Any) -> str | None:
    if not _matches(_SHA256_DIGEST, value):
        return "is not sha256: and 64 hex digits"
    return None


def http_or_file_url(value: Any) -> str | None:
    if not _matches(_HTTP_OR_FILE_URL, value):
        return "is not an https, http or file URL"
    return None


def auto_true_false(value: Any) -> str | None:
    """auto, or a boolean in any case (true, True, a YAML true)."""
    if str(value).lower() not in ("auto", "true", "false"):
        return "is not auto, true or false"
    return None


def text(value: Any) -> str:
    """A value as Jinja's string filter (and its ~ operator) writes it."""
    return str(value)


KINDS: dict[str, Callable[[Any], str | None]] = {
    "image_repository": image_repository, "image_tag": image_tag, "image_reference": image_reference,
    "registry": registry, "dns_label": dns_label, "dns_subdomain": dns_subdomain, "port": port, "url": url,
    "kubeconfig": kubeconfig, "package_version": package_version,
    "go_duration_or_infinite": go_duration_or_infinite, "prometheus_duration": prometheus_duration,
    "prometheus_duration_or_empty": prometheus_duration_or_empty, "release_tag": release_tag,
    "sha256_digest": sha256_digest, "http_or_file_url": http_or_file_url, "auto_true_false": auto_true_false,
}
# The kinds whose messages show the value as text rather than JSON (the others quote a string).
SHOWN_AS_TEXT = frozenset({"go_duration_or_infinite", "prometheus_duration", "prometheus_duration_or_empty", "release_tag",
                           "sha256_digest", "http_or_file_url", "auto_true_false"})


def string_values(variable: str, value: Any) -> list[str]:
    """A mapping whose values are strings (labels, annotations): one message per key whose value is not. A value that
    is no mapping is the argument spec's to refuse."""
    if not isinstance(value, Mapping):
        return []
    return [f"{variable}: the value of {key} is not a string" for key, item in value.items() if not isinstance(item, str)]


def mappings(variable: str, value: Any) -> list[str]:
    """A list of mappings: one message per item that is not. A value that is no list is the argument spec's to refuse."""
    if not isinstance(value, (list, tuple)):
        return []
    return [f"{variable}: {text(item)} is not a mapping" for item in value if not isinstance(item, Mapping)]


# Kinds of a whole collection, with messages of their own.
COLLECTION_KINDS: dict[str, Callable[[str, Any], list[str]]] = {"string_values": string_values, "mappings": mappings}


def kind_errors(variable: str, value: Any, kind: str) -> list[str]:
    """The messages of a value that is not of its kind (none when it is). A kubeconfig that is None or "" is not set."""
    if kind in COLLECTION_KINDS:
        return COLLECTION_KINDS[kind](variable, value)
    if kind not in KINDS:
        raise TypeError(f"{variable}: unknown kind {kind!r} (known: {', '.join(sorted([*KINDS, *COLLECTION_KINDS]))})")
    if kind == "kubeconfig" and value in (None, ""):
        return []
    problem = KINDS[kind](value)
    if not problem:
        return []
    return [f"{variable}: {text(value) if kind in SHOWN_AS_TEXT else _show(value)} {problem}"]


def context_error(variable: str, context: Any, kubeconfig: str) -> str | None:
    """The message where `context` is not a context of the kubeconfig (none where it is, is not set, or the kubeconfig
    cannot be read: its own check says that)."""
    if context in (None, ""):
        return None
    contexts = kube_contexts(kubeconfig) if kubeconfig else None
    if contexts is not None and context not in contexts:
        return f"{variable}: {_show(context)} is not a context of {kubeconfig} (it has {', '.join(contexts) or 'none'})"
    return None


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
        if kind == "kube_context":
            problem = context_error(variable, value, str(spec[2]) if len(spec) > 2 and spec[2] else "")
            errors += [problem] if problem else []
            continue
        if kind not in KINDS and kind not in COLLECTION_KINDS:
            known = ", ".join(sorted([*KINDS, *COLLECTION_KINDS, "kube_context"]))
            raise TypeError(f"input_errors: {variable}: unknown kind {kind!r} (known: {known})")
        errors += kind_errors(variable, value, kind)
    return errors


# ---------------------------------------------------------------------------------------------------------------------
# A role's declaration (roles/<role>/meta/inputs.yml):
#
#   when: {variable: value, ...}        the role's inputs are checked only where each variable has that value
#   kinds:
#     variable: kind                    or a list of kinds, or {kind: kind or list, when: {...}}
#   rules:
#     - rule: <side>.<name>             a rule of module_utils/<side>/inputs.py (RULES), called with
#       args: {parameter: variable}     the values of these variables (a parameter with a default may be undefined)
#       when: {...}
#
# A variable that is not defined is not checked by kind (its role has a default for each it declares).

DECLARATION_KEYS = frozenset({"when", "kinds", "rules"})


class Undefined(KeyError):
    """A variable the declaration names is not defined."""


class RuleFailed(Exception):
    """A rule or a kind could not run on the values given (a value of a type the argument spec refuses)."""


Values = Callable[[str], Any]
Rule = Callable[..., list[str]]


def _holds(when: Any, value: Values) -> bool:
    for variable, wanted in (when or {}).items():
        try:
            actual = value(variable)
        except Undefined:
            return False
        if isinstance(wanted, bool):
            if boolean(actual, strict=False) is not wanted:
                return False
        elif text(actual) != text(wanted):
            return False
    return True


def _kinds(spec: Any) -> tuple[list[str], Any]:
    if isinstance(spec, Mapping):
        kinds, when = spec.get("kind"), spec.get("when")
    else:
        kinds, when = spec, None
    return ([kinds] if isinstance(kinds, str) else list(kinds or [])), when


def declaration_problems(declaration: Any, rule: Callable[[str], Rule]) -> list[str]:
    """What is wrong with a declaration itself: unknown keys, kinds or rules, arguments a rule does not take or misses."""
    if not isinstance(declaration, Mapping):
        return [f"is not a mapping: {declaration!r}"]
    problems = [f"unknown key {key!r} (known: {', '.join(sorted(DECLARATION_KEYS))})" for key in declaration if key not in DECLARATION_KEYS]
    for variable, spec in (declaration.get("kinds") or {}).items():
        kinds, _when = _kinds(spec)
        problems += [f"kinds: {variable}: unknown kind {k!r}" for k in kinds if k not in KINDS and k not in COLLECTION_KINDS]
        problems += [f"kinds: {variable}: no kind"] if not kinds else []
    for entry in declaration.get("rules") or []:
        name = entry.get("rule") if isinstance(entry, Mapping) else None
        try:
            function = rule(str(name))
        except (KeyError, ValueError) as exc:
            problems.append(f"rules: {name!r}: {exc.args[0] if exc.args else exc}")
            continue
        parameters = inspect.signature(function).parameters
        args = dict(entry.get("args") or {})
        problems += [f"rules: {name}: takes no argument {a!r}" for a in args if a not in parameters]
        problems += [f"rules: {name}: argument {p!r} not given" for p, d in parameters.items() if d.default is inspect.Parameter.empty and p not in args]
    return problems


def declared_errors(declaration: Mapping[str, Any], value: Values, rule: Callable[[str], Rule], tolerate: bool = False) -> list[str]:
    """The messages of the declaration's checks on the values `value` gives (raising Undefined for a variable that is
    not defined): each kind of each variable in order, then each rule. A rule whose required variable is undefined
    raises Undefined. With `tolerate`, a check that cannot run on a value of the wrong type is left out (the argument
    spec named that value); else it raises RuleFailed."""
    if not _holds(declaration.get("when"), value):
        return []
    errors: list[str] = []
    for variable, spec in (declaration.get("kinds") or {}).items():
        kinds, when = _kinds(spec)
        if not _holds(when, value):
            continue
        try:
            current = value(variable)
        except Undefined:
            continue
        for kind in kinds:
            errors += kind_errors(variable, current, kind)
    for entry in declaration.get("rules") or []:
        if not _holds(entry.get("when"), value):
            continue
        function = rule(str(entry["rule"]))
        parameters = inspect.signature(function).parameters
        arguments: dict[str, Any] = {}
        for parameter, variable in (entry.get("args") or {}).items():
            try:
                arguments[parameter] = value(variable)
            except Undefined:
                if parameters[parameter].default is inspect.Parameter.empty:
                    raise
        try:
            errors += function(**arguments)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            if not tolerate:
                raise RuleFailed(f"{entry['rule']}: {type(exc).__name__}: {exc}") from exc
    return errors
