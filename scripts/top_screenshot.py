"""Render ``otel-rollout top`` at 80x24 to docs/images/top.png (and top.svg) (the docs' picture).

Runs a configure()d rollout of three env classes (two batches done, the third's tail
forming) and takes the screenshot with textual's pilot; the PNG needs cairosvg.

    python scripts/top_screenshot.py [OUT_DIR]
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "100")
os.environ.setdefault("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0.2")
os.environ.setdefault("OTEL_ROLLOUT_ANNOUNCE", "false")

import otel_rollout
from otel_rollout.live import Feed, Ingest, LiveState, Sources, View
from otel_rollout.live._app import TopApp

ENVS = ("gsm8k_multi_turn", "text2sql", "lcb")


def run(folder: Path, hold: threading.Event) -> None:
    rollout = otel_rollout.configure(local=True, output_dir=folder, service_name="grpo-qwen")
    rng = random.Random(3)

    def one(step: int, i: int) -> None:
        env = ENVS[i % 3]
        with rollout.tracer.trajectory(f"{step}-{i:02d}", env=env) as t:
            with t.env_setup():
                time.sleep(0.02 + 0.1 * (env == "text2sql"))
            for _ in range(rng.randint(2, 4)):
                with t.generate():
                    time.sleep(rng.uniform(0.05, 0.25))
                with t.env_step():
                    time.sleep(rng.uniform(0.01, 0.05) + 0.2 * (env == "lcb"))
            if step == 2 and i in (4, 9, 17):
                with t.generate():
                    hold.wait(30)  # the tail of the current batch
            with t.env_teardown():
                time.sleep(0.01)

    for step in range(3):
        with rollout.tracer.batch(step=step):
            threads = [threading.Thread(target=contextvars.copy_context().run,
                                        args=(one, step, i)) for i in range(24)]  # fmt: skip
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    rollout.shutdown()


async def shoot(folder: Path, out: Path) -> None:
    app = TopApp(Feed(Ingest(LiveState()), Sources.of([str(folder)])), View(), refresh_s=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(600):
            await pilot.pause(0.1)
            text = app.screen_text()
            if "3 running" in text and "step 1" in text and "21 finished" in text:
                break
        await pilot.pause(1.5)  # the tail ages a little
        app.tick()
        svg = app.export_screenshot(title="otel-rollout top")
    (out / "top.svg").write_text(svg)
    try:
        import cairosvg
    except ImportError:
        print("cairosvg not installed: wrote only top.svg", file=sys.stderr)
        return
    # a monospace font every Debian has: the SVG names Fira Code, which cairo may lack
    mono = svg.replace('"Fira Code"', '"DejaVu Sans Mono"').replace(
        "Fira Code, monospace", "DejaVu Sans Mono, monospace"
    )
    cairosvg.svg2png(bytestring=mono.encode(), write_to=str(out / "top.png"), scale=1.5)


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs/images")
    out.mkdir(parents=True, exist_ok=True)
    hold = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        writer = threading.Thread(target=run, args=(Path(tmp), hold))
        writer.start()
        try:
            asyncio.run(shoot(Path(tmp), out))
        finally:
            hold.set()
            writer.join()
    print(f"wrote {out / 'top.svg'} and {out / 'top.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
