"""Where rows live: the store seam and its engines (in process by default)."""
