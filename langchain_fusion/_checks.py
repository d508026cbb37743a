"""The one set of validators for user-facing options: constructor, per call, CLI and server alike.

Booleans are never numbers here (``alpha=True`` is an error, not 1.0) and strings are never
parsed into numbers: a check either returns the value in its canonical type or raises an
:class:`~langchain_fusion.errors.InvalidParameterError` that says what it received and what it expects.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from langchain_fusion.errors import InvalidParameterError


def is_whole_number(value: Any) -> bool:
    """True for ints (and NumPy integers), never for booleans or floats."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_int(value: Any) -> TypeGuard[int]:
    """True for Python ints, never booleans nor NumPy integers (see :func:`is_whole_number`): positions in metadata."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real_number(value: Any) -> bool:
    """True for finite ints and floats (and their NumPy kinds), never for booleans."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(float(value))


def check_positive_int(value: Any, name: str, meaning: str = "") -> int:
    """``value`` as an int if it is a whole number >= 1."""
    if not is_whole_number(value) or value < 1:
        detail = f" ({meaning})" if meaning else ""
        raise InvalidParameterError(f"{name} must be a positive whole number{detail}; got {value!r}")
    return int(value)


def check_k(k: Any) -> int:
    """The number of documents to return: a whole number >= 1."""
    return check_positive_int(k, "k", "the number of documents to return")


def check_fetch_k(fetch_k: Any) -> int | None:
    """Candidates per side: a whole number >= 1, or None for the whole corpus."""
    if fetch_k is None:
        return None
    if not is_whole_number(fetch_k) or fetch_k < 1:
        raise InvalidParameterError(
            f"fetch_k must be a positive whole number, or None for the whole corpus; got {fetch_k!r}"
        )
    return int(fetch_k)


def check_port(value: Any) -> int:
    """A TCP port to listen on: a whole number from 0 to 65535 (0: any free port)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise InvalidParameterError(f"port must be a TCP port from 0 to 65535 (0: any free port); got {value!r}")
    return value


MAX_REWRITES = 10
"""Most rewrites multi-query fusion may ask for (each is one more search)."""


def check_rewrites(n: Any) -> int:
    """The number of rewrites of a query in multi-query fusion: a whole number from 1 to :data:`MAX_REWRITES`."""
    value = check_positive_int(n, "n", "the number of rewrites of the query")
    if value > MAX_REWRITES:
        raise InvalidParameterError(
            f"n must be at most {MAX_REWRITES} (each rewrite is one more search); got {value!r}"
        )
    return value


def describe_validation(owner: str, error: ValidationError) -> str:
    """One line from a pydantic ``ValidationError``: ``Owner: field: what was wrong; ...``."""
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
        if item.get("type") not in ("value_error", "assertion_error") and "input" in item:
            message += f" (got {item['input']!r:.80})"
        problems.append(f"{where}: {message}" if where else message)
    if all(not item.get("loc") for item in error.errors(include_url=False)):
        return "; ".join(problems)  # a check of the whole object says what it is about
    return f"{owner}: " + "; ".join(problems)


class CheckedModel(BaseModel):
    """Base of the public option classes: strict types, and a refused argument is an InvalidParameterError.

    Strict, as the per-call checks are: ``True`` is not a number and ``"3"`` is not 3 (an int is
    still a float), and an unknown argument (a misspelt ``alhpa=0.3``) is refused rather than
    ignored, as it is per call. A constructor refusal is raised as one
    :class:`~langchain_fusion.errors.InvalidParameterError` line (a ``FusionError`` and a
    ``ValueError``) naming the class, the field and what was wrong, instead of pydantic's
    multi-line ``ValidationError``.
    """

    model_config = ConfigDict(strict=True)

    def __init__(self, **data: Any) -> None:
        # Checked here, not with extra="forbid": LangChain's bases set extra="ignore", and the last base wins.
        fields = type(self).model_fields
        known = set(fields) | {field.alias for field in fields.values() if field.alias}
        unknown = [name for name in data if name not in known]
        if unknown:
            owner = type(self).__name__
            raise InvalidParameterError(
                f"{owner}: {unknown[0]}: not an option of {owner}; the options are {sorted(fields)}"
            )
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidParameterError(describe_validation(type(self).__name__, exc)) from exc


@dataclass(frozen=True)
class Switch:
    """Field metadata: an option that a switch turns on at a default value.

    ``--mmr`` turns maximal marginal relevance on at its default weight.

    The command line gives such an option a switch flag beside its own, and its own flag then needs the switch.
    """

    name: str
    """The switch's name (the flag ``--NAME``)."""
    value: Any
    """The option's value when the switch is given without the option."""
    help: str
    """What the switch does, for its help text."""
    option_help: str
    """The option's help text beside the switch."""
    meaning: str
    """What the option is, in a few words, for the error of an option given without its switch."""


class OptionGroup(CheckedModel):
    """A group of search options whose fields carry their own check; their docstrings are their descriptions.

    Each group is declared beside the code that acts on it (floors, diversity, duplicates...);
    :class:`~langchain_fusion.search.options.SearchOptions` is their union.
    """

    model_config = ConfigDict(use_attribute_docstrings=True, validate_assignment=True)

    @classmethod
    def option_checks(cls) -> dict[str, Callable[[Any], Any]]:
        """The check of each option field (the function its ``BeforeValidator`` calls)."""
        checks = {}
        for name, field in cls.model_fields.items():
            for item in field.metadata:
                if isinstance(item, BeforeValidator):
                    checks[name] = item.func
        return checks  # type: ignore[return-value]  # pydantic types the func loosely


def check_no_extra(method: str, kwargs: dict[str, Any]) -> None:
    """An InvalidParameterError naming ``method`` when it was given keyword arguments it does not take."""
    if kwargs:
        raise InvalidParameterError(f"{method} got unexpected argument(s) {sorted(kwargs)}")
