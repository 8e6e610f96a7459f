"""Shared fixtures: one whisper.cpp build and one imported model, reused by every test."""

pytest_plugins = ["tests.fixtures_build"]
