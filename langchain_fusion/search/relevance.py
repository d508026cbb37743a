"""Calibrated relevance: the probability that a result is relevant, the same scale on every query.

A fused score ranks well within one query and means nothing across queries (0.9 can be the
best of bad results). :class:`RelevanceModel` maps what a result already carries to
P(relevant): a logistic model over its raw cosine similarity, its raw BM25 score (log1p) and
its rank in the fused list (log), fitted on labelled queries
(:meth:`~langchain_fusion.index.fusion_index.FusionIndex.calibrate`). All three are absolute:
a query's own best result gets no credit for being its best, so an off-topic question's first
result stays improbable. ``benchmarks/calibration.py`` measured the choice on SciFact train
(held-out expected calibration error 0.011-0.016; a floor of 0.3 answers 91-94% of held-out
queries and abstains on all 80 off-topic questions; features relative to the query's own top
gave up 7-14 points of abstention).

The model is data (its feature names, standardisation and weights), saved with the index as
JSON in its ``info`` (:data:`RELEVANCE_INFO_KEY`): never pickled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from langchain_core.documents import Document
from pydantic import ConfigDict, Field, ValidationError, model_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel, describe_validation, is_real_number
from langchain_fusion.errors import FusionError, IndexFormatError, InvalidParameterError

if TYPE_CHECKING:
    from langchain_core.retrievers import BaseRetriever


RELEVANCE_INFO_KEY = "relevance_model"
"""Where a saved index keeps its relevance model (a key of its ``info``)."""

FEATURES = ("cosine", "log_bm25", "log_rank")
"""The signals the model reads, in order: raw cosine, log(1 + raw BM25), log(fused rank)."""

MIN_POSITIVES = 5
"""Fewest relevant results a fit needs (a model of fewer is noise)."""


def check_min_relevance(value: Any) -> float | None:
    """The relevance floor: None (no floor) or a probability in [0, 1]."""
    if value is None:
        return None
    if not is_real_number(value) or not 0.0 <= float(value) <= 1.0:
        raise InvalidParameterError(f"min_relevance must be a probability between 0 and 1, or None; got {value!r}")
    return float(value)


def result_features(documents: Sequence[Document]) -> np.ndarray:
    """The :data:`FEATURES` of each result of one ranked list (rank = position, from 1), one row each."""
    rows = []
    for rank, doc in enumerate(documents, start=1):
        cosine = doc.metadata.get(keys.VECTOR_SCORE)
        bm25 = doc.metadata.get(keys.BM25_SCORE)
        rows.append(
            [
                float(cosine) if cosine is not None else 0.0,
                math.log1p(max(float(bm25), 0.0)) if bm25 is not None else 0.0,
                math.log(rank),
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


class FitQuality(CheckedModel):
    """How well a relevance model fits, measured on queries it was not fitted on (two folds)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    queries: int
    """Labelled queries the model was fitted on."""
    results: int
    """Results (top ``k`` of each query) it was fitted on."""
    relevant: int
    """How many of them are relevant."""
    expected_calibration_error: float
    """Mean gap between predicted and observed relevance over 10 equal-width bins (held out; 0 is perfect)."""
    brier_score: float
    """Mean squared error of the predicted relevance (held out; lower is better)."""


class RelevanceModel(CheckedModel):
    """P(relevant | cosine, BM25, rank): a logistic model over :data:`FEATURES`, fitted by :func:`fit_relevance`."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    features: list[str] = Field(default_factory=lambda: list(FEATURES))
    """The signals, in the order of the weights."""
    mean: list[float]
    """Each feature's mean over the fitting results (its standardisation)."""
    scale: list[float]
    """Each feature's standard deviation over the fitting results."""
    weights: list[float]
    """The logistic weight of each standardised feature."""
    bias: float
    """The logistic intercept."""
    k: int = Field(ge=1)
    """The depth it was fitted at: ranks beyond it are extrapolated."""
    dataset: str
    """The name of the labelled set it was fitted on."""
    quality: FitQuality
    """Its fit quality on held-out queries."""

    @model_validator(mode="after")
    def _consistent(self) -> RelevanceModel:
        if tuple(self.features) != FEATURES:
            raise ValueError(f"features {list(self.features)} are not the ones this version reads ({list(FEATURES)})")
        sizes = {len(self.mean), len(self.scale), len(self.weights)}
        if sizes != {len(FEATURES)}:
            raise ValueError(f"mean, scale and weights must have {len(FEATURES)} values each")
        numbers = (*self.mean, *self.scale, *self.weights, self.bias)
        if not all(math.isfinite(x) for x in numbers) or min(self.scale) <= 0:
            raise ValueError("the model's numbers must be finite, its scales positive")
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) of each row of ``features`` (columns :data:`FEATURES`)."""
        return logistic_probability(features, self.mean, self.scale, self.weights, self.bias)

    def relevance(self, documents: Sequence[Document]) -> list[float]:
        """P(relevant) of each result of one ranked list, in order."""
        return [float(p) for p in self.predict(result_features(documents))] if documents else []


def _sigmoid(x: np.ndarray) -> np.ndarray:
    p: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))
    return p


def logistic_probability(
    x: np.ndarray,
    mean: Sequence[float] | np.ndarray,
    scale: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray,
    bias: float,
) -> np.ndarray:
    """P(y=1) of each row of ``x`` under a logistic model over standardised features (see :func:`fit_logistic`)."""
    z = (x - np.asarray(mean)) / np.asarray(scale)
    return _sigmoid(bias + z @ np.asarray(weights))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-3) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, weights, bias) of an L2-regularised logistic regression, by Newton's method."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    design = np.c_[np.ones(len(x)), (x - mean) / scale]
    theta = np.zeros(design.shape[1])
    penalty = l2 * np.eye(len(theta))
    penalty[0, 0] = 0.0
    for _ in range(100):
        p = _sigmoid(design @ theta)
        gradient = design.T @ (p - y) + penalty @ theta
        hessian = (design * (p * (1 - p))[:, None]).T @ design + penalty
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return mean, scale, theta[1:], float(theta[0])


def probability_bins(predicted: np.ndarray, bins: int = 10) -> np.ndarray:
    """The bin of each probability among ``bins`` equal-width bins of [0, 1] (1.0 falls in the last)."""
    which: np.ndarray = np.minimum((np.asarray(predicted, dtype=np.float64) * bins).astype(int), bins - 1)
    return which


def expected_calibration_error(
    predicted: Sequence[float] | np.ndarray, observed: Sequence[float] | np.ndarray, bins: int = 10
) -> float:
    """Mean |predicted - observed relevance| over ``bins`` equal-width bins of predicted probability, by weight."""
    p, y = np.asarray(predicted, dtype=np.float64), np.asarray(observed, dtype=np.float64)
    if p.size == 0:
        return 0.0
    which = probability_bins(p, bins)
    gaps = [abs(p[which == b].mean() - y[which == b].mean()) * np.count_nonzero(which == b) for b in np.unique(which)]
    return float(sum(gaps) / p.size)


def fit_relevance(
    ranked: Sequence[Sequence[Document]], labels: Sequence[Sequence[bool]], *, k: int, dataset: str
) -> RelevanceModel:
    """Fit P(relevant) on labelled ranked lists: ``ranked[i]`` a query's results, ``labels[i]`` which are relevant.

    The quality is measured by two-fold cross-validation over queries (fit on half, measure on the
    other half, both ways); the model returned is fitted on all of them.
    """
    features = [result_features(docs) for docs in ranked]
    targets = [np.asarray(marks, dtype=np.float64) for marks in labels]
    x = np.concatenate(features) if features else np.empty((0, len(FEATURES)))
    y: np.ndarray = np.concatenate(targets) if targets else np.empty(0)
    positives = int(np.sum(y))
    if positives < MIN_POSITIVES or positives == len(y):
        raise FusionError(
            f"calibration needs relevant and non-relevant results among the top {k}: found {positives} relevant of "
            f"{len(y)} over {len(ranked)} queries (at least {MIN_POSITIVES} relevant); label more queries"
        )
    held_out_p: list[float] = []
    held_out_y: list[float] = []
    folds = np.arange(len(ranked)) % 2
    for fold in (0, 1):
        train = [i for i in range(len(ranked)) if folds[i] != fold]
        test = [i for i in range(len(ranked)) if folds[i] == fold and len(features[i])]
        train_y = np.concatenate([targets[i] for i in train])
        if not test or train_y.sum() == 0 or train_y.sum() == len(train_y):
            continue
        fitted = fit_logistic(np.concatenate([features[i] for i in train]), train_y)
        for i in test:
            held_out_p.extend(logistic_probability(features[i], *fitted))
            held_out_y.extend(targets[i])
    mean, scale, weights, bias = fit_logistic(x, y)
    predicted, observed = np.asarray(held_out_p), np.asarray(held_out_y)
    quality = FitQuality(
        queries=len(ranked),
        results=len(y),
        relevant=positives,
        expected_calibration_error=expected_calibration_error(predicted, observed),
        brier_score=float(np.mean((predicted - observed) ** 2)) if predicted.size else 0.0,
    )
    return RelevanceModel(
        mean=[float(v) for v in mean],
        scale=[float(v) for v in scale],
        weights=[float(v) for v in weights],
        bias=bias,
        k=k,
        dataset=dataset,
        quality=quality,
    )


class LabelledQueries(Protocol):
    """Queries with relevance labels, as a calibration reads them (an ``EvalDataset`` is one)."""

    @property
    def name(self) -> str:
        """A short name for reports and errors."""
        ...

    @property
    def queries(self) -> Mapping[str, str]:
        """Query id -> query text."""
        ...

    @property
    def qrels(self) -> Mapping[str, Mapping[str, int]]:
        """Query id -> document id -> relevance grade (> 0: relevant)."""
        ...


def calibrate_search(search: BaseRetriever, dataset: LabelledQueries, *, k: int) -> RelevanceModel:
    """Fit a :class:`RelevanceModel` on what ``search`` (a retriever returning ``k`` results) returns for ``dataset``.

    Each labelled query's results are labelled relevant when ``dataset.qrels`` names their
    ``Document.id``; :func:`fit_relevance` fits the model and measures its held-out quality. What
    :meth:`FusionIndex.calibrate <langchain_fusion.index.fusion_index.FusionIndex.calibrate>` and
    :meth:`HierarchicalIndex.calibrate <langchain_fusion.index.hierarchical.HierarchicalIndex.calibrate>` share.
    """
    if not dataset.queries:
        raise InvalidParameterError(f"{dataset.name}: no labelled queries to calibrate on")
    floor = getattr(search, "min_relevance", None)
    if floor is not None:
        raise InvalidParameterError(
            f"calibrate fits on every result of the search, so it takes no min_relevance (got {floor}): leave it out"
        )
    ranked = search.batch(list(dataset.queries.values()))
    labels = [
        [dataset.qrels.get(query_id, {}).get(str(doc.id), 0) > 0 for doc in docs]
        for query_id, docs in zip(dataset.queries, ranked, strict=True)
    ]
    return fit_relevance(ranked, labels, k=k, dataset=dataset.name)


def top_relevance(search: BaseRetriever, model: RelevanceModel | None, query: str, index: str = "index") -> float:
    """The calibrated relevance of the best result ``search`` (asking for one result) finds for ``query``; 0.0 if none.

    What ``answerability`` returns on a plain or a hierarchical index; ``index`` names its kind in the error
    raised when ``model`` is None (:func:`require_model`).
    """
    require_model(model, "answerability", index)
    results = search.invoke(query)
    return float(results[0].metadata[keys.RELEVANCE]) if results else 0.0


def saved_model(saved: Any, where: str = "this index") -> RelevanceModel:
    """A relevance model read back from its saved JSON data; IndexFormatError when it is not a valid one."""
    try:
        return RelevanceModel.model_validate(saved)
    except (ValueError, TypeError) as exc:
        problem = describe_validation("RelevanceModel", exc) if isinstance(exc, ValidationError) else str(exc)
        raise IndexFormatError(
            f"the relevance model saved with {where} is not valid ({problem}); calibrate it again"
        ) from None


class SavedModel:
    """The relevance model of some saved JSON data, parsed once per data object (it changes when recalibrated)."""

    def __init__(self, where: str = "this index") -> None:
        """``where``: what the model is saved with, for the error an invalid one raises."""
        self.where = where
        self._data: Any = None
        self._model: RelevanceModel | None = None

    def of(self, saved: Any) -> RelevanceModel | None:
        """The model ``saved`` holds (None for None): parsed on first sight of this object, then reused."""
        if saved is None:
            return None
        if self._data is not saved:
            self._model, self._data = saved_model(saved, self.where), saved
        return self._model


def require_model(model: RelevanceModel | None, asked: str, index: str = "index") -> RelevanceModel:
    """``model``, or the one error that says ``asked`` (what needed it) needs a calibrated ``index`` (its kind)."""
    if model is None:
        raise InvalidParameterError(
            f"{asked} needs a calibrated {index}: fit one with index.calibrate(dataset) (labelled queries, e.g. "
            f"load_beir(folder, split='train') or load_labelled, or langchain-fusion eval --calibrate) and save it"
        )
    return model


def with_relevance(
    documents: list[Document], model: RelevanceModel | None, floor: float | None, index: str = "index"
) -> list[Document]:
    """``documents`` (one ranked list) with ``metadata["relevance"]``, those below ``floor`` left out.

    Without a model there is no relevance (never a made-up one); a floor then is an error
    (naming the kind of ``index`` that needs calibrating).
    """
    if model is None:
        if floor is not None:
            require_model(model, "min_relevance", index)
        return documents
    for doc, value in zip(documents, model.relevance(documents), strict=True):
        doc.metadata[keys.RELEVANCE] = value
    if floor is None:
        return documents
    return [doc for doc in documents if doc.metadata[keys.RELEVANCE] >= floor]
