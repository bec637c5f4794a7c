"""One config dataclass -> command-line flags and environment variables, the same in every process.

Every field is a flag (`max_slots` -> `--max-slots`) and an env var (`<PREFIX>MAX_SLOTS`); a flag
beats the env, the env beats the default. Tuples are comma-separated (element type from the field's
annotation: `tuple[int, ...]` or `tuple[str, ...]`); booleans take 1/0/true/false and get
`--x/--no-x` flags. A bad value exits with a usage error naming the flag or variable.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def field_default(f: Field):
    return f.default if f.default is not MISSING else f.default_factory()


def env_name(prefix: str, field_name: str) -> str:
    return prefix + field_name.upper()


def _tuple_element_type(f: Field) -> type:
    annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if "tuple[int" in str(annotation):
        return int
    if "tuple[float" in str(annotation):
        return float
    return str


def convert(f: Field, raw, source: str):
    """`raw` (a flag or env string) as the type of field `f`; ValueError naming `source`."""
    default = field_default(f)
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(f"{source}: expected 1/0/true/false, got {raw!r}")
    try:
        if isinstance(default, tuple):
            element = _tuple_element_type(f)
            return tuple(element(part.strip()) for part in str(raw).split(",") if part.strip())
        return type(default)(raw)
    except ValueError:
        raise ValueError(f"{source}: cannot read {raw!r} as {type(default).__name__}") from None


def build_parser(config_cls, env_prefix: str, prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for f in fields(config_cls):
        default = field_default(f)
        flag = "--" + f.name.replace("_", "-")
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else repr(default)
        text = f"env {env_name(env_prefix, f.name)}; default {shown}"
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)
    return parser


def config_from(config_cls, env_prefix: str, parser: argparse.ArgumentParser,
                argv: list[str], environ: Mapping[str, str]):
    """Flags over env over defaults -> `config_cls(...)`; parser.error (exit 2) on a bad value."""
    args = parser.parse_args(argv)
    values = {}
    try:
        for f in fields(config_cls):
            raw, source = getattr(args, f.name), "--" + f.name.replace("_", "-")
            if raw is None:
                raw, source = environ.get(env_name(env_prefix, f.name)), env_name(env_prefix, f.name)
            if raw is not None:
                values[f.name] = convert(f, raw, source)
        return config_cls(**values)
    except ValueError as exc:
        parser.error(str(exc))
