"""Bundled data: the BIRD cards file of the demo and its attribution."""
