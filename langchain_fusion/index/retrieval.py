"""Searching an index the fused way: its retriever, the explanation of a result, and calibrated relevance.

:class:`FusedRetrieval` is the part of :class:`~langchain_fusion.index.fusion_index.FusionIndex`
that goes through :meth:`~FusedRetrieval.as_retriever` (the fused
:class:`~langchain_fusion.retrievers.fusion.FusionRetriever`), and the relevance model a
calibrated index keeps in its saved info.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from langchain_fusion._checks import check_k
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.diversity import DEFAULT_MMR_WEIGHT
from langchain_fusion.search.relevance import (
    RELEVANCE_INFO_KEY,
    LabelledQueries,
    RelevanceModel,
    SavedModel,
    calibrate_search,
)

if TYPE_CHECKING:
    from langchain_fusion.index.fusion_index import FusionIndex
    from langchain_fusion.retrievers.fusion import FusionRetriever
    from langchain_fusion.search.explain import Explanation

SEARCH_TYPES = ("fusion", "similarity", "mmr")
"""The ``search_type`` values of :meth:`FusedRetrieval.as_retriever`."""


class FusedRetrieval(VectorStore):
    """The fused retriever of an index, explanations, and its calibrated relevance (a base of ``FusionIndex``)."""

    saved_info: dict[str, Any]
    """What the index keeps beside its rows (the relevance model among it)."""
    _relevance: SavedModel

    # --- calibrated relevance ----------------------------------------------------------------

    @property
    def relevance_model(self) -> RelevanceModel | None:
        """The calibrated relevance model (:meth:`calibrate`), saved with the index; None when not calibrated."""
        return self._relevance.of(self.saved_info.get(RELEVANCE_INFO_KEY))

    def calibrate(self, dataset: LabelledQueries, *, k: int = 10, **options: Any) -> RelevanceModel:
        """Fit the index's relevance model on labelled queries; every result then carries ``metadata["relevance"]``.

        ``dataset``: queries with relevance labels over this index's documents, e.g.
        ``load_beir(folder, split="train")`` or ``load_labelled(path, documents)``; labels are
        matched by ``Document.id``. Each query's top ``k`` under the default search (or the
        search ``options`` given: those you will query with) is scored as
        :class:`~langchain_fusion.search.relevance.RelevanceModel` reads it, and the model is
        fitted (its held-out quality in ``model.quality``). It replaces any earlier model and is
        kept in :attr:`saved_info`: :meth:`save` (or a store's own persistence) keeps it with the index.
        """
        k = check_k(k)
        model = calibrate_search(self.as_retriever(k=k, **options), dataset, k=k)
        self.saved_info = {**self.saved_info, RELEVANCE_INFO_KEY: model.model_dump(mode="json")}
        return model

    def answerability(self, query: str, **options: Any) -> float:
        """How likely the index answers ``query``: the calibrated relevance of its best result (0.0 if none).

        A gate before answering: below a threshold (0.3 is a start; measure yours with ``eval``),
        say the documents do not cover the question instead of calling a model. ``options`` are
        search options (e.g. ``filter``). Needs a calibrated index (:meth:`calibrate`).
        """
        from langchain_fusion.search.relevance import top_relevance

        return top_relevance(self.as_retriever(k=1, **options), self.relevance_model, query)

    def explain(self, query: str, document: str | Document, **options: Any) -> Explanation:
        """Why ``document`` (a chunk's ``Document.id``, or the chunk) is or is not a result of searching ``query``.

        ``options`` are the search options of :meth:`as_retriever` (``k``, ``alpha``, ``fetch_k``,
        ``filter``, floors, the cap per source, maximal marginal relevance, ``duplicates``...). The answer
        (:class:`~langchain_fusion.search.explain.Explanation`) is read from the same search
        ``as_retriever(**options).invoke(query)`` runs: returned at which rank, or where it
        dropped out (filtered, outside both candidate pools with its rank on each side, below a
        floor, a duplicate, capped per source, not picked by MMR, below ``k``, below
        ``min_relevance``). ``print(index.explain(...))`` shows it in a sentence. An unknown id
        is an :class:`~langchain_fusion.errors.UnknownDocumentError`.
        """
        return self.as_retriever(**options).explain(query, document)

    # --- retrieval --------------------------------------------------------------------------

    def as_retriever(  # type: ignore[override]  # returns the fused retriever, not a VectorStoreRetriever
        self, *, search_type: str = "fusion", search_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> FusionRetriever:
        """A :class:`~langchain_fusion.retrievers.fusion.FusionRetriever` over this index.

        Keyword arguments (or LangChain's ``search_kwargs``) are its fields: the search options of
        :class:`~langchain_fusion.search.options.SearchOptions` (``k``, ``alpha``, ``fetch_k``,
        ``method``, ``filter``, relevance floors and diversity), and ``tags``, ``metadata``.
        ``search_type`` is ``"fusion"`` (the default), ``"similarity"`` (the vector side alone:
        ``alpha=1``) or ``"mmr"`` (the fused candidates re-ranked by maximal marginal relevance,
        whose weight of relevance defaults to 0.5; MMR chooses among the best ``fetch_k`` fused
        candidates). An unknown option or search type is an error that lists the valid ones, and so is an
        option given both ways with two different values (``as_retriever(k=3, search_kwargs={"k": 2})``).
        """
        from langchain_fusion.retrievers.fusion import FusionRetriever

        given = search_kwargs or {}
        for name in sorted(set(given) & set(kwargs)):
            if given[name] != kwargs[name]:
                raise InvalidParameterError(
                    f"{name} is given twice with different values, {name}={kwargs[name]!r} and "
                    f"search_kwargs={{{name!r}: {given[name]!r}}}: give it once"
                )
        options = {**given, **kwargs}
        valid = sorted(set(FusionRetriever.model_fields) - {"index", "callbacks", "verbose"})
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise InvalidParameterError(f"unknown retriever option(s) {unknown}; the options are {valid}")
        if search_type == "similarity":
            if options.get("alpha", 1.0) != 1.0:
                raise InvalidParameterError("search_type='similarity' is the vector side alone (alpha=1); drop alpha")
            options["alpha"] = 1.0
        elif search_type == "mmr":
            if options.setdefault("lambda_mult", DEFAULT_MMR_WEIGHT) is None:
                raise InvalidParameterError(
                    "search_type='mmr' needs a lambda_mult between 0 and 1; drop lambda_mult=None"
                )
        elif search_type not in SEARCH_TYPES:
            raise InvalidParameterError(f"search_type must be one of {list(SEARCH_TYPES)}; got {search_type!r}")
        return FusionRetriever(index=cast("FusionIndex", self), **options)
