"""Page summaries kept in line with their chunks, source by source, in a store beside the chunk index.

A folder's hierarchical index is saved whole: each ``index --summaries`` run summarises every page
(the chat model's answers are cached, so an unchanged page costs no call), embeds the summaries into
a new summary index and replaces the folder at once. A store that writes as it goes (Milvus) keeps
the summaries in a store of their own beside the chunks
(:class:`~langchain_fusion.stores.registry.SummaryStores`), and a run brings them in line with the
chunks instead (:func:`plan_summaries`, then :func:`sync_summaries`):

- a source's summaries are *current* when the chunk ids they cover
  (:data:`~langchain_fusion.metadata.SUMMARY_CHUNK_IDS`) are exactly the source's chunks and none of
  them is a fallback (a failed call's leading text, retried on the next run);
- the sources whose summaries are not current are summarised again (cached answers cost no call),
  their new summaries upserted, and then their summaries of pages that are gone deleted;
- the summaries of sources without chunks are deleted;
- with another summarizer (:meth:`~langchain_fusion.ingest.summaries.PageSummarizer.fingerprint`:
  another model or prompts) every source is summarised again, as a fresh build would.

The rows themselves are the state, so a run stopped at any point (killed, Ctrl-C, a failing model)
leaves summaries the next run finds not current and redoes: a rerun repairs it. A run with nothing
new reads ids and summaries, and calls and embeds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.sync import chunk_ids_by_source
from langchain_fusion.ingest.summaries import PageSummarizer, page_units
from langchain_fusion.models.call_reports import LLMReport
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.stores.tenants import scoped

BATCH_CHUNKS = 1000
"""About how many chunks' pages are summarised, embedded and written per step (whole sources), so a stopped
run keeps the steps it finished."""

SUMMARISED_WITH = "summarised_with"
"""The key, in the hierarchical entry of the chunk store's record, of the summarizer's fingerprint (per tenant
under ``by_tenant``)."""


@dataclass
class SummaryPlan:
    """What :func:`plan_summaries` found to do for one tenant (or the whole index)."""

    chunks: list[Document]
    """The chunks of the sources to summarise again (shared objects: not to be changed)."""
    sources: list[str]
    """The sources to summarise again."""
    gone: list[str]
    """The sources whose summaries go (they have no chunk any more)."""
    held: dict[str, list[str]] = field(default_factory=dict)
    """The ids of the summaries the store holds, by source, of the sources to summarise again or remove."""
    pages: int = 0
    """Pages and sections to summarise."""

    @property
    def nothing_to_do(self) -> bool:
        """True when every source's summaries are current."""
        return not self.sources and not self.gone


def plan_summaries(
    chunks: FusionIndex,
    summaries: FusionIndex,
    summarizer: PageSummarizer,
    tenant: str | None = None,
    *,
    everything: bool = False,
) -> SummaryPlan:
    """The sources of ``chunks`` (``tenant``'s, when given) whose summaries in ``summaries`` are not current.

    ``everything``: summarise every source again (another summarizer than the one recorded).
    """
    current = chunk_ids_by_source(chunks, tenant)
    held: dict[str, list[Document]] = {}
    for summary in summaries.view(tenant).iter_documents():
        held.setdefault(str(summary.metadata.get(keys.SOURCE, "")), []).append(summary)
    sources = [s for s in sorted(current) if everything or not _current(held.get(s, []), current[s])]
    gone = sorted(set(held) - set(current))
    view = chunks.view(tenant)
    found = view.keys_of([chunk_id for source in sources for chunk_id in sorted(current[source])])
    documents = view.documents(found[found >= 0])
    return SummaryPlan(
        documents,
        sources,
        gone,
        {source: [doc.id or "" for doc in held[source]] for source in [*sources, *gone] if source in held},
        len(page_units(documents, summarizer.section_chars)),
    )


def _current(summaries: list[Document], chunk_ids: set[str]) -> bool:
    """Whether these summaries of a source cover exactly its chunks, none of them a fallback."""
    covered: set[str] = set()
    for summary in summaries:
        if summary.metadata.get(keys.SUMMARY_FALLBACK):
            return False
        covered.update(summary.metadata.get(keys.SUMMARY_CHUNK_IDS) or ())
    return bool(summaries) and covered == chunk_ids


def sync_summaries(
    chunks: FusionIndex,
    summaries: FusionIndex,
    summarizer: PageSummarizer,
    plan: SummaryPlan,
    tenant: str | None = None,
    *,
    summary_progress: ProgressCallback | None = None,
    progress: ProgressCallback | None = None,
    callbacks: Callbacks = None,
) -> LLMReport:
    """Carry out ``plan``: summarise, embed and upsert, then delete what is stale, a batch of sources at a time.

    ``summary_progress`` counts summarised pages, ``progress`` embedded summaries. On a tenant-keyed index each
    summary carries ``tenant`` under the tenant key, as :func:`~langchain_fusion.index.hierarchical.summarize_pages`
    gives it.
    """
    key = chunks.tenant_key
    report = summarizer.summarize([])[1]
    for sources, batch in _batches(plan.chunks):
        made, part = summarizer.summarize(batch, progress=summary_progress, callbacks=callbacks)
        if key is not None and tenant is not None:
            made = [s.model_copy(update={"metadata": {**s.metadata, key: tenant}}) for s in made]
        summaries.add_documents(made, progress=progress)
        report = report.merged(part)
        fresh = {summary.id for summary in made}
        _delete(summaries, [i for source in sources for i in plan.held.get(source, []) if i not in fresh], tenant)
    missing = set(plan.sources) - {str(doc.metadata.get(keys.SOURCE, "")) for doc in plan.chunks}
    _delete(summaries, [i for source in [*plan.gone, *sorted(missing)] for i in plan.held.get(source, [])], tenant)
    return report


def _batches(chunks: list[Document]) -> Iterator[tuple[list[str], list[Document]]]:
    """Whole sources of ``chunks``, about :data:`BATCH_CHUNKS` chunks at a time: (the sources, their chunks)."""
    by_source: dict[str, list[Document]] = {}
    for chunk in chunks:
        by_source.setdefault(str(chunk.metadata.get(keys.SOURCE, "")), []).append(chunk)
    sources: list[str] = []
    batch: list[Document] = []
    for source, members in by_source.items():
        sources.append(source)
        batch.extend(members)
        if len(batch) >= BATCH_CHUNKS:
            yield sources, batch
            sources, batch = [], []
    if batch:
        yield sources, batch


def _delete(summaries: FusionIndex, ids: list[str], tenant: str | None) -> int:
    """Delete these summaries (``tenant``'s, on a tenant-keyed index); how many went."""
    if not ids:
        return 0
    if tenant is None:
        return summaries.store.delete(ids)
    return scoped(summaries.store, tenant).delete_in(tenant, ids)


def recorded_summarizer(entry: Mapping[str, Any], tenant: str | None) -> Any:
    """The recorded fingerprint of the summarizer of ``tenant``'s summaries (or the index's); None if none is."""
    if tenant is None:
        return entry.get(SUMMARISED_WITH)
    own = (entry.get("by_tenant") or {}).get(tenant)
    return own.get(SUMMARISED_WITH) if isinstance(own, Mapping) else None


def with_summarizer(entry: Mapping[str, Any], tenant: str | None, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """``entry`` recording that ``tenant``'s summaries (or the index's) are now made with ``fingerprint``."""
    updated = dict(entry)
    if tenant is None:
        updated[SUMMARISED_WITH] = fingerprint
        return updated
    by_tenant = dict(updated.get("by_tenant") or {})
    by_tenant[tenant] = {SUMMARISED_WITH: fingerprint}
    updated["by_tenant"] = by_tenant
    return updated
