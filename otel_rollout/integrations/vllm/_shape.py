"""Where ``sampling_params``, ``request_id`` and ``trace_headers`` sit in a call, read once
from the engine's signature, so arguments are found and replaced wherever they are passed."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any


class CallShape:
    """The positions and names of a callable's parameters (after ``skip`` leading ones)."""

    __slots__ = ("names", "positions", "var_kw")

    def __init__(self, fn: Callable[..., Any], skip: int = 0) -> None:
        self.positions: dict[str, int] = {}
        self.names: set[str] = set()
        self.var_kw = True
        try:
            params = list(inspect.signature(fn).parameters.values())[skip:]
        except (TypeError, ValueError):
            return
        self.var_kw = False
        index = 0
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                self.var_kw = True
                continue
            if p.kind is p.VAR_POSITIONAL:
                index = -1
                continue
            self.names.add(p.name)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and index >= 0:
                self.positions[p.name] = index
                index += 1

    def get(self, name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
        """The argument ``name`` of a call, positional or keyword; None when absent."""
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return args[i]
        return kwargs.get(name)

    def accepts(self, name: str) -> bool:
        return self.var_kw or name in self.names

    def put(self, name: str, value: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments with ``name`` set to ``value`` where it was (or as keyword)."""
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return (*args[:i], value, *args[i + 1 :]), kwargs
        return args, {**kwargs, name: value}
