"""Every key of a configuration model, with its type, default and description, as
`tandem run --help` shows them (the same text the Prefect UI shows on its form).

    for key in config_keys(RunConfig): print(key.dotted, key.default, key.description)

Owns listing and formatting only; the fields and their descriptions live on the
models beside the components they configure.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from flows.config_loader import _model_of


@dataclass(frozen=True)
class ConfigKey:
    dotted: str  # "inference.sampling.temperature"
    type_name: str  # "float", "'micro' | 'corpus'"
    default: str  # as it would be written in TOML, or "required"
    description: str


def config_keys(model_cls: type[BaseModel], prefix: str = "") -> list[ConfigKey]:
    """Leaf keys of `model_cls` in declaration order; sections become dotted prefixes."""
    keys = []
    for name, field in model_cls.model_fields.items():
        nested = _model_of(field.annotation)
        if nested is not None:
            if field.default is None:  # an optional block: off unless one of its keys is set
                keys.append(ConfigKey(f"{prefix}{name}", "section", "unset (off)", field.description or ""))
            keys.extend(config_keys(nested, f"{prefix}{name}."))
            continue
        keys.append(
            ConfigKey(f"{prefix}{name}", _type_name(field.annotation), _default(field), field.description or "")
        )
    return keys


def format_keys(model_cls: type[BaseModel]) -> str:
    """Keys grouped by top-level section, two lines each: `key (type) = default`, then the description."""
    lines: list[str] = []
    section = None
    for key in config_keys(model_cls):
        top = key.dotted.split(".", 1)[0] if "." in key.dotted else ""
        if top != section:
            section = top
            lines.append(f"[{top}]" if top else "(top level)")
        lines.append(f"  {key.dotted} ({key.type_name}) = {key.default}")
        if key.description:
            lines.append(f"      {key.description}")
    return "\n".join(lines)


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return _toml(value)


def _toml(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _toml(value.value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, dict):
        return (
            f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(annotation) if a is not Ellipsis)}]"
        )
    if annotation is type(None):
        return "none"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(repr(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))
