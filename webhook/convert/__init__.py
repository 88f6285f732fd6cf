"""Manifests rewritten into the DRA form (README.md beside this file: what belongs here, what it may import)."""
