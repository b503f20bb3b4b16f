"""The terminal app of ``otel-rollout top`` (textual): the screen, refreshed about once a
second, following the terminal's size, and its keys."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from otel_rollout.live._feed import Feed
from otel_rollout.live._screen import SORTS, View, render, selectable
from otel_rollout.live._tree import jaeger_url, tree_text


class TreeScreen(Screen):
    """A trajectory's span tree and its Jaeger link; escape goes back."""

    BINDINGS: ClassVar = [Binding("escape,q,enter", "app.pop_screen", "back")]

    def __init__(self, trace_id: str, label: str, text: str, link: str) -> None:
        super().__init__()
        self._head = Text(f"trajectory {label or '?'}  trace {trace_id}\n", style="bold")
        self._head.append(f"Jaeger: {link}\n", style="underline")
        self._text = text

    def compose(self) -> ComposeResult:
        body = Text.assemble(self._head, Text.from_ansi(self._text))
        with VerticalScroll():
            yield Static(body, id="tree")
        yield Footer()


class TopApp(App):
    """``otel-rollout top``: poll, render, repeat; the keys change the :class:`View`."""

    TITLE = "otel-rollout top"
    ENABLE_COMMAND_PALETTE = False
    CSS = "Screen { overflow: hidden; } #screen { width: 100%; height: 1fr; }"
    BINDINGS: ClassVar = [
        Binding("q", "quit", "quit"),
        Binding("p", "pause", "pause"),
        Binding("f", "filter", "env filter"),
        Binding("s", "sort", "sort"),
        Binding("w", "processes", "per process"),
        Binding("up,k", "move(-1)", "select", show=False),
        Binding("down,j", "move(1)", "select", show=False),
        Binding("enter,t", "tree", "span tree"),
    ]

    def __init__(self, feed: Feed, view: View | None = None, *, refresh_s: float = 1.0,
                 jaeger: str | None = None, bands: dict[str, str] | None = None,
                 on_exit: Any = None) -> None:  # fmt: skip
        super().__init__()
        self.feed = feed
        self.state = feed.ingest.state
        self.view = view or View()
        self.refresh_s = refresh_s
        self.jaeger = jaeger
        self.bands = bands
        self._on_exit = on_exit
        self.frames = 0

    def compose(self) -> ComposeResult:
        yield Static(id="screen")
        yield Footer()

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(self.refresh_s, self.tick)

    def on_resize(self) -> None:
        self.draw()

    def tick(self) -> None:
        """One refresh: read what arrived (unless paused), then draw."""
        if not self.view.paused:
            try:
                self.feed.poll(budget_s=0.6 * self.refresh_s)
            except Exception as exc:  # never a traceback on the screen
                self.view.notes = [f"reading failed: {exc!r}"]
            self.state.tick()
        self.draw()

    def screen_text(self) -> str:
        """What the screen shows now, as plain text (tests, ``--once``)."""
        return "\n".join(t.plain for t in self._renderable().renderables)

    def _renderable(self) -> Any:
        v = self.view
        v.live = self.feed.status()
        v.notes = self.feed.notes()
        size = self.size
        return render(self.state, v, max(20, size.width), max(6, size.height - 1),
                      self.feed.reader_losses())  # fmt: skip

    def draw(self) -> None:
        try:
            widget = self.query_one("#screen", Static)
        except Exception:  # another screen is shown
            return
        widget.update(self._renderable())
        self.frames += 1

    def action_pause(self) -> None:
        self.view.paused = not self.view.paused
        self.draw()

    def action_filter(self) -> None:
        envs = sorted(set(self.state.finished_by_env) | set(self.state.running_by_env()))
        choices = [None, *envs]
        i = choices.index(self.view.env) if self.view.env in choices else 0
        self.view.env = choices[(i + 1) % len(choices)]
        self.view.selected = 0
        self.draw()

    def action_sort(self) -> None:
        self.view.sort = SORTS[(SORTS.index(self.view.sort) + 1) % len(SORTS)]
        self.draw()

    def action_processes(self) -> None:
        self.view.processes = not self.view.processes
        self.draw()

    def action_move(self, step: int) -> None:
        n = len(selectable(self.state, self.view))
        if n:
            self.view.selected = (self.view.selected + step) % n
        self.draw()

    def action_tree(self) -> None:
        items = selectable(self.state, self.view)
        if not items:
            self.notify("nothing to select: no running trajectory or straggler yet")
            return
        trace_id, label = items[min(self.view.selected, len(items) - 1)]
        text = tree_text(self.state, trace_id, self.bands, label)
        self.push_screen(TreeScreen(trace_id, label, text, jaeger_url(trace_id, self.jaeger)))
