"""Builders the test modules share: objects, views, runners and scenarios (no tests here)."""
