"""The terminal app of ``otel-rollout top`` (textual): the screen, its keys, and a
trajectory's span tree with its Jaeger link."""

from __future__ import annotations

from typing import Any, ClassVar

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from otel_rollout import attributes as A
from otel_rollout._export.console_render import TreeRenderer
from otel_rollout.live._ingest import Feed
from otel_rollout.live._screen import SORTS, View, render, selectable
from otel_rollout.live._state import LiveState
from otel_rollout.report._model import RawSpan
from otel_rollout.report._timeline import jaeger_url as jaeger_base


def jaeger_url(trace_id: str, base: str | None = None) -> str:
    return f"{jaeger_base(base)}/trace/{trace_id}"


def _readable(s: RawSpan) -> ReadableSpan:
    tid, flags = int(s.trace_id, 16), TraceFlags(TraceFlags.SAMPLED)
    parent = SpanContext(tid, s.parent_id, False, flags) if s.parent_id else None
    status = Status(StatusCode.ERROR) if s.status_code is StatusCode.ERROR else Status()
    return ReadableSpan(name=s.name, context=SpanContext(tid, s.span_id, False, flags),
                        parent=parent, attributes=s.attributes, start_time=s.start_ns,
                        end_time=s.end_ns, status=status)  # fmt: skip


def tree_text(state: LiveState, trace_id: str, bands: dict[str, str] | None = None,
              trajectory_id: str = "") -> str:  # fmt: skip
    """The trajectory's tree (ANSI colours): all its spans once it finished, those that
    ended so far while it runs; or a line saying why there is none."""
    held = state.tree(trace_id, trajectory_id)
    if held is None or not held[0]:
        return (f"trace {trace_id}: no spans of it held (none ended yet, or it finished "
                "long ago); open it in Jaeger")  # fmt: skip
    spans, finished = held
    roots = [s for s in spans if A.TRAJECTORY_ID in s.attributes]
    mine = [s for s in roots if s.attributes.get(A.TRAJECTORY_ID) == trajectory_id]
    renderer = TreeRenderer(bands)
    if finished and roots:
        root = (mine or roots)[0]
        rest = [_readable(s) for s in spans if s is not root]
        return renderer.render_root(_readable(root), rest, True, False)
    readable = [_readable(s) for s in spans]
    return renderer.render_partial(int(trace_id, 16), readable, "running: the spans that ended")


class TreeScreen(Screen):
    """A trajectory's span tree and its Jaeger link; escape goes back."""

    BINDINGS: ClassVar = [Binding("escape,q,enter", "app.pop_screen", "back")]

    def __init__(self, trace_id: str, label: str, text: str, link: str) -> None:
        super().__init__()
        head = (f"trajectory {label or '?'}  trace {trace_id}\n", "bold")
        self._body = Text.assemble(head, (f"Jaeger: {link}\n", "underline"), Text.from_ansi(text))

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self._body, id="tree")
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
                 jaeger: str | None = None,
                 bands: dict[str, str] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.feed, self.state = feed, feed.ingest.state
        self.view = view or View()
        self.refresh_s, self.jaeger, self.bands = refresh_s, jaeger, bands

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
        """What the screen shows now, as plain text (tests)."""
        return "\n".join(t.plain for t in self._renderable().renderables)

    def _renderable(self) -> Any:
        v, size = self.view, self.size
        v.live, v.notes = self.feed.status(), self.feed.notes()
        return render(self.state, v, max(20, size.width), max(6, size.height - 1),
                      self.feed.reader_losses())  # fmt: skip

    def draw(self) -> None:
        try:
            widget = self.query_one("#screen", Static)
        except Exception:  # another screen is shown
            return
        widget.update(self._renderable())

    def _redraw(self, **change: Any) -> None:
        for key, value in change.items():
            setattr(self.view, key, value)
        self.draw()

    def action_pause(self) -> None:
        self._redraw(paused=not self.view.paused)

    def action_filter(self) -> None:
        envs = set(self.state.finished_by_env) | set(self.state.running_by_env())
        choices = [None, *sorted(envs)]
        i = choices.index(self.view.env) if self.view.env in choices else 0
        self._redraw(env=choices[(i + 1) % len(choices)], selected=0)

    def action_sort(self) -> None:
        self._redraw(sort=SORTS[(SORTS.index(self.view.sort) + 1) % len(SORTS)])

    def action_processes(self) -> None:
        self._redraw(processes=not self.view.processes)

    def action_move(self, step: int) -> None:
        n = len(selectable(self.state, self.view))
        self._redraw(selected=(self.view.selected + step) % n if n else self.view.selected)

    def action_tree(self) -> None:
        items = selectable(self.state, self.view)
        if not items:
            self.notify("nothing to select: no running trajectory or straggler yet")
            return
        trace_id, label = items[min(self.view.selected, len(items) - 1)]
        text = tree_text(self.state, trace_id, self.bands, label)
        self.push_screen(TreeScreen(trace_id, label, text, jaeger_url(trace_id, self.jaeger)))
