"""Raw Kubernetes objects (README.md beside this file: what belongs here, what it may import)."""
