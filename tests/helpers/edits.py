"""Edits of a nested evidence document, for the schema tests' refusals: each returns a
function that changes the dict it is given in place."""

from __future__ import annotations


def delete_at(*keys):
    """An edit that deletes the value at the path ``keys``."""
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return edit


def set_at(value, *keys):
    """An edit that sets the value at the path ``keys`` to ``value``."""
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return edit
