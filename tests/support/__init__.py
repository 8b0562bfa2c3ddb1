"""Builders and case tables shared by unit and integration tests."""
