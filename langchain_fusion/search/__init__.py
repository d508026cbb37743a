"""Fusion math and the fused search over a store view."""
