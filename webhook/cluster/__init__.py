"""Talking to a cluster (README.md beside this file: what belongs here, what it may import)."""
