"""One admission request in, one answer out (README.md beside this file: what belongs here, what it may import)."""
