"""Ingestion: loading files, chunking, contextual enrichment and page summaries."""
