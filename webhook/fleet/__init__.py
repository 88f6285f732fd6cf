"""The cluster under the policy, for people (README.md beside this file: what belongs here, what it may import)."""
