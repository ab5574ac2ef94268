"""Run configuration: a pydantic model filled from a TOML file plus command-line overrides.

    cfg = load_config(RunConfig, "configs/tiny.toml", ["--trainer.lr", "1e-5", "--rollout.group_size=8"])

Precedence: model defaults < TOML file < overrides, in order. An override value is
read as a TOML literal (`1e-5`, `true`, `[1, 2]`, `"text"`) or else JSON, and stays
a plain string when it is neither (`--run.name tiny`); a value that only fits its
field as text (`--run.name 2024`) is retried as the string typed.

Every problem is reported at once in one `ConfigError`: unknown keys with the keys
allowed at that level (and the closest match), bad values with the allowed choices
(Literal and Enum fields) or pydantic's reason, each naming its dotted key and
where it came from. A model may name keys it refuses with their reason (a class
attribute `refused_keys`: key -> message), e.g. the trainer keys `tandem sft` never
reads. Owns loading and checking only; the models live beside the
components they configure.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import enum
import json
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message lists every problem and its fix."""


def load_config(model_cls: type[M], toml_path: str | Path | None, overrides: list[str]) -> M:
    """Build `model_cls` from the TOML file at `toml_path` (optional) and `overrides`."""
    data = _read_toml(toml_path) if toml_path is not None else {}
    source = {key: f"in {toml_path}" for key in _dotted_keys(data)}
    parsed = parse_overrides(overrides)
    for key, (_raw, value) in parsed.items():
        _set_dotted(data, key, value)
        source[key] = f"from --{key}"

    problems = _unknown_keys(model_cls, data, "", source)
    if problems:
        raise ConfigError(_report(problems))
    try:
        return model_cls.model_validate(data)
    except ValidationError as first:
        retried = _as_strings(model_cls, data, first, parsed)
        if retried is None:
            raise ConfigError(_report(_describe(model_cls, first, source))) from None
        try:
            return model_cls.model_validate(retried)
        except ValidationError as exc:
            raise ConfigError(_report(_describe(model_cls, exc, source))) from None


def parse_overrides(overrides: list[str]) -> dict[str, tuple[str, Any]]:
    """`["--a.b", "1", "--c=x"]` -> {"a.b": ("1", 1), "c": ("x", "x")}: dotted key -> (text, value)."""
    parsed: dict[str, tuple[str, Any]] = {}
    i = 0
    while i < len(overrides):
        token = overrides[i]
        if not token.startswith("--") or len(token) == 2:
            raise ConfigError(
                f"override {token!r} is not an option: write overrides as --section.key VALUE or --section.key=VALUE"
            )
        if "=" in token:
            key, raw = token[2:].split("=", 1)
            i += 1
        else:
            key = token[2:]
            if i + 1 == len(overrides) or overrides[i + 1].startswith("--"):
                raise ConfigError(f"override --{key} has no value: write --{key} VALUE or --{key}=VALUE")
            raw = overrides[i + 1]
            i += 2
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override --{key} names no key: write --section.key VALUE")
        parsed[key] = (raw, parse_value(raw))
    return parsed


def parse_value(raw: str) -> Any:
    """A TOML literal, else JSON, else the text itself. Dates stay text: no field wants them."""
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
        if not isinstance(value, (datetime.date, datetime.time)):
            return value
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _read_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist: check the path, or leave it out to use the defaults"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML ({exc}): fix the line it names") from None


def _dotted_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if isinstance(value, dict):
            keys.extend(_dotted_keys(value, f"{dotted}."))
    return keys


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            prefix = ".".join(parts[: i + 1])
            raise ConfigError(
                f"override --{key}: {prefix} is a value, not a section, so it has no key {parts[i + 1]!r}"
            )
        node = child
    node[parts[-1]] = value


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`Model`, `Model | None`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [m for arg in typing.get_args(annotation) if (m := _model_of(arg))]
        return models[0] if len(models) == 1 else None
    return None


def _unknown_keys(model_cls: type[BaseModel], data: dict[str, Any], prefix: str, source: dict[str, str]) -> list[str]:
    fields = model_cls.model_fields
    names = {name: name for name in fields} | {f.alias: name for name, f in fields.items() if f.alias}
    problems = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        refused = getattr(model_cls, "refused_keys", {})
        if key not in names and key in refused:
            problems.append(f"{dotted} ({_where(source, dotted)}): {refused[key]}")
            continue
        if key not in names:
            allowed = ", ".join(fields) or "(none)"
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            where = f"under {prefix[:-1]!r}" if prefix else "at the top level"
            problems.append(f"{dotted} ({_where(source, dotted)}): unknown key{hint} Allowed {where}: {allowed}")
            continue
        nested = _model_of(fields[names[key]].annotation)
        if nested is not None and isinstance(value, dict):
            problems.extend(_unknown_keys(nested, value, f"{dotted}.", source))
    return problems


def _field_at(model_cls: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation that `loc` (a pydantic error location) points to, if it is a plain field path."""
    model: type[BaseModel] | None = model_cls
    annotation = None
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = _model_of(annotation)
    return annotation


def _allowed_values(annotation: Any) -> list[Any] | None:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [member.value for member in annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if (values := _allowed_values(arg)) is not None:
                return values
    return None


def _describe(model_cls: type[BaseModel], exc: ValidationError, source: dict[str, str]) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith(("literal[", "function-"))))
        field_loc = tuple(p for p in loc if isinstance(p, str))
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        where = _where(source, ".".join(field_loc))
        allowed = _allowed_values(_field_at(model_cls, field_loc))
        if allowed is not None and error["type"] in ("literal_error", "enum"):
            choices = ", ".join(repr(v) for v in allowed)
            problems.append(f"{dotted} ({where}): got {error['input']!r}; allowed values: {choices}")
        elif error["type"] == "missing":
            problems.append(f"{dotted}: required; set it in the TOML file or pass --{dotted} VALUE")
        else:
            problems.append(f"{dotted} ({where}): {error['msg']} (got {error['input']!r})")
    return problems


def _as_strings(
    model_cls: type[BaseModel], data: dict[str, Any], exc: ValidationError, parsed: dict[str, tuple[str, Any]]
) -> dict[str, Any] | None:
    """A copy of `data` where failing overrides aimed at text fields hold the text typed
    (`--run.name 2024` parses as a number); None when there is no such override."""
    failed = {".".join(str(p) for p in e["loc"] if isinstance(p, str)) for e in exc.errors()}
    retry = {
        key: raw
        for key, (raw, value) in parsed.items()
        if key in failed and not isinstance(value, str) and _accepts_text(_field_at(model_cls, tuple(key.split("."))))
    }
    if not retry:
        return None
    as_text = copy.deepcopy(data)
    for key, raw in retry.items():
        _set_dotted(as_text, key, raw)
    return as_text


def _accepts_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and str in typing.get_args(annotation)


def _where(source: dict[str, str], dotted: str) -> str:
    """Where a key (or the first key under it) was set."""
    if dotted in source:
        return source[dotted]
    return next((v for k, v in source.items() if k.startswith(f"{dotted}.")), "default value")


def _report(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return (
        f"invalid configuration ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n{lines}\n"
        "Fix the TOML file or the --key VALUE overrides named above."
    )
