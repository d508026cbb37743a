"""The in-process store: exact vector scans, BM25 postings, snapshots and the folder format."""
