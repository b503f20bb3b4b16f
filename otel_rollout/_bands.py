"""The band registry: every band of a trajectory's breakdown declared once, as data
(docs/accounting.md). Every breakdown, table, picture, histogram, summary key and help
text reads :data:`DEFAULT_BANDS`; adding a band is one entry there (and its docs). It sits
at the bottom of the layers, so it imports nothing of the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_COLOUR = re.compile(r"#[0-9a-fA-F]{6}\Z")


@dataclass(frozen=True, slots=True)
class Band:
    """One band of a breakdown. The remainder band (``other``) holds what no phase span
    covers; it has no spans and comes last whatever its priority."""

    #: The band's name: the ``rollout.phase`` value of its spans and the key of its figures.
    name: str
    #: Where spans of two bands overlap in time, the band of lower priority gets the time.
    priority: int
    #: ``#rrggbb``: its colour in every picture, table and terminal.
    colour: str
    #: At most five characters, for narrow table headers.
    label: str
    #: The ``<key>`` of SkyRL's ``generate/trajectory_time_<key>_{mean,p90,max}``.
    skyrl_key: str
    #: What the report's verdict calls a run bound by this band (``engine-bound``...).
    bound: str
    remainder: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"band name {self.name!r}: expected lower-case letters, digits and '_'"
            )
        if not isinstance(self.colour, str) or not _COLOUR.match(self.colour):
            raise ValueError(f"band {self.name!r}: colour {self.colour!r} is not '#rrggbb'")
        if not self.label or len(self.label) > 5:
            raise ValueError(f"band {self.name!r}: label {self.label!r} must be 1-5 characters")

    @property
    def ansi(self) -> str:
        """The terminal escape that sets the foreground to the nearest of the 256 xterm
        colours, which every colour terminal shows."""
        rgb = tuple(int(self.colour[i : i + 2], 16) for i in (1, 3, 5))
        return f"\x1b[38;5;{xterm256(rgb)}m"


#: The six levels of each channel in the xterm colour cube.
_CUBE = (0, 95, 135, 175, 215, 255)


def xterm256(rgb: tuple[int, ...]) -> int:
    """The xterm colour (16-255: the 6x6x6 cube and the grey ramp) nearest to ``rgb``."""

    def nearest(v: int) -> int:
        return min(range(6), key=lambda i: abs(_CUBE[i] - v))

    r, g, b = (nearest(v) for v in rgb)
    cube = (_CUBE[r], _CUBE[g], _CUBE[b])
    level = min(range(24), key=lambda i: abs(8 + 10 * i - sum(rgb) // 3))
    grey = (8 + 10 * level,) * 3

    def dist(c: tuple[int, ...]) -> int:
        return sum((x - y) ** 2 for x, y in zip(c, rgb, strict=True))

    return 232 + level if dist(grey) < dist(cube) else 16 + 36 * r + 6 * g + b


@dataclass(frozen=True, eq=False, repr=False)
class BandRegistry:
    """The bands of a breakdown: those that phase spans fill, in overlap priority, and the
    remainder last. Immutable; :meth:`with_band` makes a new registry with one more band
    (a scoped registry passed to the accounting, for tests and experiments)."""

    bands: tuple[Band, ...]
    #: Every band's name, in priority order, the remainder last.
    names: tuple[str, ...] = field(init=False)
    #: The names of the bands phase spans fill (all but the remainder), in priority order.
    phased: tuple[str, ...] = field(init=False)
    #: The remainder band's name.
    remainder: str = field(init=False)
    #: A phased band's position in :attr:`phased` (its code in flat interval arrays).
    index: MappingProxyType[str, int] = field(init=False)
    _by_name: MappingProxyType[str, Band] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        bands = tuple(self.bands)
        rest = [b for b in bands if b.remainder]
        if len(rest) != 1:
            raise ValueError(f"a band registry needs exactly one remainder band, got {len(rest)}")
        names = [b.name for b in bands]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"band names must be unique; repeated: {', '.join(dupes)}")
        keys = [b.skyrl_key for b in bands]
        if len(set(keys)) != len(keys):
            raise ValueError(f"band skyrl_key values must be unique, got {keys}")
        phased = sorted((b for b in bands if not b.remainder), key=lambda b: b.priority)
        ordered = (*phased, rest[0])
        set_ = object.__setattr__
        set_(self, "bands", ordered)
        set_(self, "names", tuple(b.name for b in ordered))
        set_(self, "phased", tuple(b.name for b in phased))
        set_(self, "remainder", rest[0].name)
        set_(self, "index", MappingProxyType({b.name: i for i, b in enumerate(phased)}))
        set_(self, "_by_name", MappingProxyType({b.name: b for b in ordered}))

    def __iter__(self) -> Iterator[Band]:
        return iter(self.bands)

    def __len__(self) -> int:
        return len(self.bands)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Band:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(
                f"unknown band {name!r}; expected one of {', '.join(self.names)}"
            ) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BandRegistry) and self.bands == other.bands

    def __hash__(self) -> int:
        return hash(self.bands)

    def __repr__(self) -> str:
        return f"BandRegistry({', '.join(self.names)})"

    def __reduce__(self) -> Any:
        # The default registry pickles as a reference to it (Ray ships many breakdowns).
        return "DEFAULT_BANDS" if self is DEFAULT_BANDS else (BandRegistry, (self.bands,))

    @property
    def colours(self) -> MappingProxyType[str, str]:
        """Each band's colour (``#rrggbb``) by name, in order: the one palette."""
        return MappingProxyType({b.name: b.colour for b in self.bands})

    def bound_by(self) -> dict[str, tuple[str, ...]]:
        """The verdict's categories (:attr:`Band.bound`), each with its bands, in order."""
        out: dict[str, tuple[str, ...]] = {}
        for b in self.bands:
            out[b.bound] = (*out.get(b.bound, ()), b.name)
        return out

    def check(self, name: Any) -> str:
        """``name`` when it names a band, else a ``ValueError`` listing the bands."""
        if name not in self._by_name:
            raise ValueError(f"unknown band {name!r}; expected one of {', '.join(self.names)}")
        return name

    def with_band(self, band: Band) -> BandRegistry:
        """A new registry with ``band`` added (this one is unchanged)."""
        return BandRegistry((*self.bands, band))


#: The bands of every breakdown. Engine time comes first, so ``env`` only holds env time
#: not hidden behind a generate; colours are colour-blind safe (seaborn's "deep").
DEFAULT_BANDS = BandRegistry(
    (
        Band("llm", 10, "#4C72B0", "llm", "llm", "engine"),
        Band("env", 20, "#55A868", "env", "env", "env"),
        Band("env_setup", 30, "#C44E52", "setup", "env_setup", "setup"),
        Band("env_teardown", 40, "#8172B2", "tdown", "env_teardown", "setup"),
        Band("other", 1000, "#CCB974", "other", "other", "bookkeeping", remainder=True),
    )
)
