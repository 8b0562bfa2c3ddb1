"""The real-engine lane (a package so that its one engine is package-scoped: see conftest)."""
