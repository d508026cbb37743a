"""A retriever's configurable fields whose ``batch`` keeps the retriever's real batch (one per configuration)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.runnables.configurable import RunnableConfigurableFields

from langchain_fusion.search.options import TenantOption

TENANT_CONFIG = "langchain_fusion_tenant"
"""The configurable key of the tenant a request is bound to: set by the server from trusted context only (the
request guard refuses it, as any field not offered, in what a client sends)."""


class BatchByConfiguration(RunnableConfigurableFields[str, list[Document]]):
    """Configurable fields whose ``batch`` keeps the retriever's real batch.

    LangChain's version answers a batch whose requests configure anything one ``invoke`` at a
    time (each request gets its own configured copy). Here the inputs are grouped by the values
    they configure, and each group runs through one configured retriever's ``batch``: one
    embedding call and one scoring pass per group, results in input order.
    """

    wrap: Callable[[BaseRetriever], Runnable[str, list[Document]]] | None = None
    """Builds the served pipeline (multi-query, rerank) around each configured retriever; None serves it as is."""

    def _prepare(self, config: RunnableConfig | None = None) -> tuple[Runnable[str, list[Document]], RunnableConfig]:
        bound, prepared = super()._prepare(config)
        tenant = ((config or {}).get("configurable") or {}).get(TENANT_CONFIG)
        if tenant is not None and isinstance(bound, TenantOption):  # the request's tenant, bound by the server
            bound = bound.model_copy(update={"tenant": tenant})
        if self.wrap is not None and isinstance(bound, BaseRetriever):
            return self.wrap(bound), prepared
        return bound, prepared

    def _groups(self, configs: list[RunnableConfig]) -> list[list[int]]:
        ids = {field.id for field in self.fields.values() if isinstance(field, ConfigurableField)} | {TENANT_CONFIG}
        groups: dict[str, list[int]] = {}
        for position, config in enumerate(configs):
            chosen = {k: v for k, v in (config.get("configurable") or {}).items() if k in ids}
            groups.setdefault(json.dumps(chosen, sort_keys=True, default=repr), []).append(position)
        return list(groups.values())

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Each group of inputs configured alike goes through one configured retriever's ``batch``."""
        configs = get_config_list(config, len(inputs))
        results: list[Any] = [None] * len(inputs)
        for positions in self._groups(configs):
            bound, _ = self.prepare(configs[positions[0]])
            answers = bound.batch(
                [inputs[i] for i in positions],
                [configs[i] for i in positions],
                return_exceptions=return_exceptions,
                **kwargs,
            )
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of :meth:`batch`."""
        configs = get_config_list(config, len(inputs))
        results: list[Any] = [None] * len(inputs)
        for positions in self._groups(configs):
            bound, _ = self.prepare(configs[positions[0]])
            answers = await bound.abatch(
                [inputs[i] for i in positions],
                [configs[i] for i in positions],
                return_exceptions=return_exceptions,
                **kwargs,
            )
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results
