"""Ratatoskr provider: settings, the combined multi-plane app, the CLI and the uvicorn entry."""
