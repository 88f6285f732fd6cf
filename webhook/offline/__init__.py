"""The admission path over files (README.md beside this file: what belongs here, what it may import)."""
