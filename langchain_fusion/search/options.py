"""The search options: one typed schema that every retriever, the CLI, the server and MCP derive from.

:class:`SearchOptions` holds the options of a fused search, each a field with its default, its
check (the same function validates the constructor, a per-call override, a CLI flag and a
request) and its description. Everything else is derived from it:

- the retrievers' fields (:class:`~langchain_fusion.retrievers.fusion.FusionRetriever` *is* a
  ``SearchOptions``) and the options their ``invoke`` takes per call (:data:`OPTION_CHECKS`);
- the command line's flags (``--min-bm25-score`` from ``min_bm25_score``, its help from the
  description and the default);
- LangServe's configurable fields and the MCP search tool's input schema
  (:func:`request_annotation`: the field's type and bounds, ``k`` capped by the server's ``max_k``).

A new option is a field here and its logic in the search; no face lists the options.
:class:`HierarchyOptions` does the same for hierarchical (summary -> chunk) search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Union

from pydantic import BeforeValidator, Field, WithJsonSchema
from pydantic.fields import FieldInfo

from langchain_fusion._checks import OptionGroup, Switch, check_fetch_k, check_k, check_positive_int, is_real_number
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.diversity import DiversityOptions
from langchain_fusion.search.duplicates import DuplicateOptions
from langchain_fusion.search.floors import FloorOptions
from langchain_fusion.search.fusion import FusionMethod, check_alpha, check_method
from langchain_fusion.search.relevance import check_min_relevance
from langchain_fusion.stores.filters import MetadataFilter, check_filter
from langchain_fusion.stores.tenants import check_tenant

FilterValue = Union[str, int, float, bool, None, list[Union[str, int, float, bool, None]]]
"""A filter condition sent over the wire: a metadata value to equal, or a list of values (any of them)."""

RequestFilter = dict[str, FilterValue]
"""A metadata filter as a request sends it (JSON): ``{"source": "report.pdf", "page": [3, 4]}``."""

_FILTER_SCHEMA = WithJsonSchema(
    {
        "anyOf": [
            {
                "type": "object",
                "additionalProperties": {
                    "anyOf": [
                        {"type": ["string", "number", "boolean", "null"]},
                        {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}},
                    ]
                },
            },
            {"type": "null"},
        ]
    }
)


def check_summary_weight(value: Any) -> float:
    """The weight of a summary's score in a chunk's hierarchical score: a number in [0, 1]."""
    if not is_real_number(value) or not 0.0 <= float(value) <= 1.0:
        raise InvalidParameterError(f"summary_weight must be a number between 0 and 1; got {value!r}")
    return float(value)


def check_k_summaries(value: Any) -> int:
    """How many summaries a hierarchical search selects: a whole number >= 1."""
    return check_positive_int(value, "k_summaries", "how many summaries to select")


class ResultsOption(OptionGroup):
    """How many results a search returns."""

    k: Annotated[int, BeforeValidator(check_k), Field(ge=1)] = 4
    """How many results to return."""


class TenantOption(OptionGroup):
    """Whose documents a search reads, on a tenant-keyed index (see :mod:`~langchain_fusion.stores.tenants`)."""

    tenant: Annotated[Annotated[str, Field(pattern=r"\S")] | None, BeforeValidator(check_tenant)] = None
    """The tenant whose documents are searched, on a tenant-keyed index (required there; refused elsewhere): the
    results are exactly those of an index of that tenant's documents alone. Set by the caller's own code, a
    server's configuration or its proxy's header, never by a served request."""


class FilterOption(OptionGroup):
    """Which documents a search may return."""

    filter: Annotated[MetadataFilter | None, BeforeValidator(check_filter), _FILTER_SCHEMA] = None
    """Only results whose metadata equals these values, e.g. {"source": "report.pdf", "page": [3, 4]} (a list
    means any of its values); applied before ranking. A served request's filter narrows the server's own, never
    widens it. In Python, also a callable on the metadata."""


class FusionOptions(ResultsOption):
    """How two sides are fused: the weight of each, the candidate pool, the method."""

    alpha: Annotated[float, BeforeValidator(check_alpha), Field(ge=0.0, le=1.0)] = 0.5
    """Weight of meaning-based (vector) search, 0 to 1; 1 - alpha is the weight of exact keyword (BM25) search:
    1 is vector only, 0 is BM25 only. Higher for paraphrases, lower for names, codes and rare terms."""
    fetch_k: Annotated[Annotated[int, Field(ge=1)] | None, BeforeValidator(check_fetch_k)] = 100
    """Candidates taken from each side before fusion (each candidate's other score is looked up exactly);
    None scores the whole corpus."""
    method: Annotated[FusionMethod, BeforeValidator(check_method)] = "weighted"
    """Fusion method: weighted (min-max normalised, the default), zscore or rrf (reciprocal rank fusion)."""

    LOCAL_ONLY: ClassVar[frozenset[str]] = frozenset({"fetch_k"})
    """Options a served request may not set: they bound what one request costs, so the server decides them."""


class RelevanceOption(OptionGroup):
    """The floor on calibrated relevance (fused and hierarchical search; each index brings its own calibration)."""

    min_relevance: Annotated[Annotated[float, Field(ge=0.0, le=1.0)] | None, BeforeValidator(check_min_relevance)] = (
        None
    )
    """Floor on a result's calibrated relevance, P(relevant) from 0 to 1 (needs an index calibrated on labelled
    queries): lower results are left out, so a question the documents do not answer gets none. None: no floor."""


class FusedSelectionOptions(DiversityOptions, FloorOptions):
    """Raw-score floors and diversity: options of fused search over one index (hierarchical search takes none).

    The floors keep only candidates that clear a raw-score floor on a side with weight
    (:class:`~langchain_fusion.search.floors.FloorOptions`); diversity spreads the results
    (:class:`~langchain_fusion.search.diversity.DiversityOptions`).
    """


class PoolOptions(FusedSelectionOptions, DuplicateOptions, FilterOption, TenantOption, FusionOptions):
    """What the fused search over a candidate pool reads (:func:`~langchain_fusion.search.pool.fused_search`).

    The floor on calibrated relevance is applied to its results (it needs the documents).
    """


class SearchOptions(RelevanceOption, PoolOptions):
    """Every option of a fused search: the pool and weights, relevance floors and diversity.

    Construct one to check a set of options at once.
    """


class HierarchyOptions(OptionGroup):
    """The options of hierarchical search: summaries first, then the chunks of the selected pages."""

    k_summaries: Annotated[int, BeforeValidator(check_k_summaries), Field(ge=1)] = 3
    """How many summaries (pages or sections) to select before searching their chunks."""
    summary_weight: Annotated[float, BeforeValidator(check_summary_weight), Field(ge=0.0, le=1.0)] = 0.5
    """Weight of the summary's score in a chunk's score, 0 to 1; the chunk's own fused score gets the rest."""


class HierarchicalSearchOptions(
    HierarchyOptions, RelevanceOption, DuplicateOptions, FilterOption, TenantOption, FusionOptions
):
    """Every option of a hierarchical search: the fusion of both levels, filter, duplicates, relevance, hierarchy."""


SEARCH_DEFAULTS = SearchOptions()
"""The default search options (``SEARCH_DEFAULTS.k``...)."""

SERVER_ONLY_OPTIONS: frozenset[str] = FusionOptions.LOCAL_ONLY | frozenset(TenantOption.model_fields)
"""Options a served request may not set: the server decides them (``fetch_k`` bounds what a request costs; the
tenant comes from trusted context: the server's configuration or its proxy's header)."""

COUNT_OPTIONS = ("k", "k_summaries")
"""The options that count results (of a search, of its summary search): a server bounds them by its ``max_k``."""

DEFAULT_WINDOW_MAX_CHARS = 4000
"""Default character budget of a context window passage (:mod:`~langchain_fusion.retrievers.windows`): a hit with
its nearest neighbours (three default chunks, about 2,600 characters) fits; wider windows and long runs of
neighbours are trimmed. None lifts it."""

OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    **SearchOptions.option_checks(),
    **HierarchyOptions.option_checks(),
}
"""The check of every search option, by name: fields, per-call overrides, CLI flags and requests all use it."""

SELECTION_OPTIONS: tuple[str, ...] = (*FusedSelectionOptions.model_fields, *RelevanceOption.model_fields)
"""The relevance floor and diversity options: fused search over one index takes them all, hierarchical search
``min_relevance`` only (:data:`FUSED_ONLY_OPTIONS` are the others)."""

FUSED_ONLY_OPTIONS: tuple[str, ...] = tuple(FusedSelectionOptions.model_fields)
"""The raw-score floors and diversity options, which hierarchical search does not take."""


def option_field(name: str) -> FieldInfo:
    """The schema field of a search option (its default, bounds and description)."""
    for model in (SearchOptions, HierarchyOptions):
        if name in model.model_fields:
            return model.model_fields[name]
    raise InvalidParameterError(f"unknown search option {name!r}; the options are {sorted(OPTION_CHECKS)}")


def describe_option(name: str, *, request: bool = False) -> str:
    """The description of option ``name`` on one line (for help texts and schemas).

    ``request``: for a served request, whose options are JSON and whose null (or absence) means
    the server's default: the sentences about None and Python callables are left out.
    """
    text = " ".join((option_field(name).description or "").split())
    if not request:
        return text
    kept = [part for part in text.split(". ") if not part.startswith(("None:", "In Python"))]
    return ". ".join(kept).rstrip(".") + ". Null or absent: the server's default."


def request_annotation(name: str, max_k: int | None = None, *, nullable: bool = False) -> Any:
    """The type of option ``name`` as a request sends it (JSON), with its bounds and description.

    For LangServe's configurable fields and the MCP tool's input schema: a filter is its JSON form
    (a callable cannot be sent), ``k`` and ``k_summaries`` are at most ``max_k`` when given, and
    ``nullable`` also takes None (for "the server's default").
    """
    field = option_field(name)
    annotation: Any = RequestFilter | None if name == "filter" else field.annotation
    if nullable:
        annotation = annotation | None
    constraints = [item for item in field.metadata if not isinstance(item, (BeforeValidator, WithJsonSchema, Switch))]
    bounds: dict[str, Any] = {"le": max_k} if max_k is not None and name in COUNT_OPTIONS else {}
    description = describe_option(name, request=True)
    metadata = (annotation, *constraints, Field(description=description, **bounds))  # Annotated[x, *y]: 3.11 syntax
    return Annotated[metadata]


def check_options(options: dict[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``options`` checked by their own checks; InvalidParameterError for a name not in ``names`` (default: any)."""
    allowed = tuple(OPTION_CHECKS) if names is None else names
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidParameterError(f"unknown option(s) {unknown}; the options are {list(allowed)}")
    return {name: OPTION_CHECKS[name](value) for name, value in options.items()}
