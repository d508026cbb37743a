"""Helpers shared by the test modules: import them from here, never from another test module or the conftest."""
