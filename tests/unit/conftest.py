"""Hardware facts of the lab profiles, as gpu_info reads them, for the module_utils tests; and a check of a value
against the TypedDicts that declare it."""

from __future__ import annotations

import types
import typing

import pynvml
import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nvml as nvml_module
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

from lab.sim.hardware import build_fake_nvml, load_profile, write_hardware


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file")


@pytest.fixture(scope="module")
def info_of(tmp_path_factory):
    lib = build_fake_nvml(tmp_path_factory.mktemp("cache"))
    cache: dict[str, dict] = {}

    def read(profile: str) -> dict:
        if profile not in cache:
            hw = tmp_path_factory.mktemp(profile)
            write_hardware(load_profile(profile), hw, "m", "6.8.0-45-generic", lib)
            nvml = hw / "nvml/libnvidia-ml.so.1"
            with pytest.MonkeyPatch.context() as patch:
                if not nvml.exists():
                    # No NVIDIA library on this machine: not even the one an earlier profile loaded in this process.
                    patch.setattr(nvml_module, "DEFAULT_LIBRARY", "libnvidia-ml-absent.so.1")
                    patch.setattr(pynvml, "nvmlLib", None)
                    patch.setattr(pynvml, "CDLL", _refuse)
                cache[profile] = collect(str(hw), str(nvml) if nvml.exists() else None)
        return cache[profile]

    return read


def _schema_errors(value: object, expected: object, where: str) -> list[str]:
    """Where value differs from the type: keys missing or extra in a TypedDict, a wrong type, a value outside a Literal."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if typing.is_typeddict(expected):
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a mapping"]
        hints = typing.get_type_hints(expected)
        errors = [f"{where}.{k}: missing" for k in sorted(set(hints) - set(value))]
        errors += [f"{where}.{k}: not in {expected.__name__}" for k in sorted(set(value) - set(hints), key=str)]
        for key, hint in hints.items():
            if key in value:
                errors += _schema_errors(value[key], hint, f"{where}.{key}")
        return errors
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [e for i, item in enumerate(value) for e in _schema_errors(item, args[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a mapping"]
        return [e for k, v in value.items() for e in _schema_errors(k, args[0], f"{where} key") + _schema_errors(v, args[1], f"{where}[{k!r}]")]
    if origin in (typing.Union, types.UnionType):
        branches = [_schema_errors(value, arg, where) for arg in args]
        return [] if any(not b for b in branches) else [f"{where}: {value!r} is none of {expected}"]
    if origin is typing.Literal:
        return [] if value in args and type(value) in {type(a) for a in args} else [f"{where}: {value!r} is not one of {args}"]
    if expected is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if expected in (bool, str, float):
        return [] if isinstance(value, expected) else [f"{where}: {value!r} is not a {expected.__name__}"]
    if expected is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{where}: {value!r} is not an int"]
    raise TypeError(f"{where}: the schema check does not know {expected!r}")


@pytest.fixture
def schema_errors():
    """schema_errors(value, SomeTypedDict) -> [] when value has exactly the declared keys, each of its declared type."""

    def check(value: object, expected: object) -> list[str]:
        return _schema_errors(value, expected, getattr(expected, "__name__", "value"))

    return check
