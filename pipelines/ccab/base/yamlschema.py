"""Reading YAML files against pydantic models, with errors that name the field.

The three files a person writes (a rollout plan, a simulation scenario, a lab experiment) are
read by pydantic models built from :class:`Strict` (no coercion: ``"5"`` is not an int, ``true``
is not a number; unknown keys are errors; a key given as ``null`` counts as absent). Every
problem of a file becomes one line that starts with its field path::

    stages[1].fraction: must be in (0, 1], got 1.5
    arms[1].cc: unknown congestion control 'bbrv2'; known: cubic, reno, ...
    bogus: unknown field (allowed: rollout_id, description, ...)

:func:`problems` turns a :class:`pydantic.ValidationError` into those lines. Bounds and choices
use :func:`number` and :func:`one_of`, whose messages are the ones above; a model validator that
checks one field against another raises :func:`field_error` to name the field it blames.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Callable, Iterable

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["Strict", "ValidationError", "field_error", "number", "one_of", "path_of", "problems"]


class Strict(BaseModel):
    """A YAML mapping: strict types, no unknown keys, ``key: null`` = key absent, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool = False) -> str:
    return (f"{'(' if lo_open else '['}{lo if lo is not None else '-inf'}, "
            f"{hi if hi is not None else 'inf'}{')' if hi_open else ']'}")


def number(kind: type, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False) -> Any:
    """An ``int`` or ``float`` field within [lo, hi] (``(lo, …`` with ``lo_open``, ``…, hi)`` with
    ``hi_open``). A float field takes an int; neither takes a bool or a string."""
    ranged = lo is not None or hi is not None

    def check(v: Any) -> Any:
        kinds = (int, float) if kind is float else (int,)
        if isinstance(v, bool) or not isinstance(v, kinds):
            what = "a number" if kind is float else "an integer"
            raise ValueError(f"must be {what}{' in ' + _range_text(lo, hi, lo_open, hi_open) if ranged else ''}, "
                             f"got {type(v).__name__} {v!r:.40}")
        if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and (v >= hi if hi_open else v > hi)):
            raise ValueError(f"must be in {_range_text(lo, hi, lo_open, hi_open)}, got {v}")
        return float(v) if kind is float else v

    return Annotated[kind, BeforeValidator(check)]


def one_of(choices: Callable[[], Iterable[str]] | Iterable[str], what: str = "value") -> Any:
    """A string field that must be one of ``choices`` (or of what a function returns when the field
    is read: a list that may grow, e.g. the vocabulary's metrics)."""

    def check(v: Any) -> Any:
        if not isinstance(v, str):
            raise ValueError(f"must be str, got {type(v).__name__} {v!r:.40}")
        known = tuple(choices() if callable(choices) else choices)
        if v not in known:
            raise ValueError(f"unknown {what} {v!r}; {'known' if what != 'value' else 'one of'}: {', '.join(known)}")
        return v

    return Annotated[str, BeforeValidator(check)]


def field_error(field: str, message: str) -> PydanticCustomError:
    """For a model validator: ``message`` about ``field`` of the model (``field`` may be a nested
    path, ``a.b``, or an index, ``[2]``)."""
    return PydanticCustomError("ccab_field", "{message}", {"field": field, "message": message})


def path_of(loc: Iterable[Any], prefix: str = "") -> str:
    """``("stages", 1, "fraction")`` → ``stages[1].fraction`` (after ``prefix``)."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


_KIND = {"int_type": "int", "float_type": "float", "string_type": "str", "bool_type": "bool"}


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that holds the field at ``loc`` (for the allowed keys of an unknown one)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        # unwrap Annotated, Optional/unions, list/tuple/dict to the model inside
        for _ in range(6):
            if isinstance(current, type) and issubclass(current, BaseModel):
                break
            args = [a for a in typing.get_args(current) if a is not type(None)]
            origin = typing.get_origin(current)
            if origin is Annotated:
                current = args[0]
            elif origin in (typing.Union, types.UnionType, list, tuple, dict) and args:
                current = next((a for a in reversed(args) if isinstance(a, type) and issubclass(a, BaseModel)),
                               args[-1])
            else:
                break
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def problems(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[str]:
    """One line per error of ``exc`` (raised validating ``model``), each starting with its path."""
    out = []
    for e in exc.errors(include_url=False):
        loc, kind, value = tuple(e["loc"]), e["type"], e.get("input")
        path = path_of(loc, prefix) or "(top level)"
        if kind == "ccab_field":
            field = e["ctx"]["field"]
            sub = path_of(loc, prefix)
            path = (sub or "(top level)") if not field else f"{sub}{field}" if field.startswith("[") \
                else f"{sub}.{field}" if sub else field
            out.append(f"{path}: {e['ctx']['message']}")
        elif kind == "missing":
            out.append(f"{path}: required")
        elif kind == "extra_forbidden":
            holder = _model_at(model, loc[:-1])
            allowed = f" (allowed: {', '.join(holder.model_fields)})" if holder else ""
            out.append(f"{path}: unknown field{allowed}")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            out.append(f"{path}: must be a mapping, got {type(value).__name__}")
        elif kind in ("list_type", "tuple_type"):
            out.append(f"{path}: must be a list, got {type(value).__name__}")
        elif kind in _KIND:
            out.append(f"{path}: must be {_KIND[kind]}, got {type(value).__name__} {value!r:.40}")
        elif kind == "value_error":
            out.append(f"{path}: {e['ctx']['error']}")
        elif kind == "too_short":
            out.append(f"{path}: at least {e['ctx']['min_length']} required, got {e['ctx'].get('actual_length', 0)}")
        else:
            out.append(f"{path}: {e['msg']}")
    return out
