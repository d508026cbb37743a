"""Where things are: the checkout, its sample data, and the URL test clients reach an in-process app at."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout (the folder holding ``pyproject.toml``)."""
DATA = REPO / "data"
"""The bundled sample: the Arden microgrids report, the maintenance handbook and their labelled queries."""
SAMPLE_PDF = DATA / "arden-microgrids-report.pdf"
"""The sample's PDF report (14 pages)."""
SAMPLE_MD = DATA / "maintenance-handbook.md"
"""The sample's markdown handbook."""
SAMPLE_QUERIES = DATA / "queries.json"
"""The sample's labelled queries (what ``eval`` measures)."""
LOOPBACK_URL = "http://127.0.0.1"
"""Where test clients reach the LangServe app: a server on a loopback address answers only this machine's names."""
