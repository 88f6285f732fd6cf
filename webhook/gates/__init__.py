"""Kubernetes versions and their feature gates (README.md beside this file: what belongs here, what it may import)."""
