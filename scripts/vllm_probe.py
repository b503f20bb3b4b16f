#!/usr/bin/env python3
"""Can vLLM run a model step on this machine? One short request through vLLM's own offline
``LLM`` on the given model, in float32, nothing of otel-rollout involved.

Exit 0 when it answered. Otherwise the engine could not run here (a CPU whose vLLM build
dies with SIGILL, too little memory): CI then says so in one line and skips the real-vLLM
tests instead of failing on the machine it got. Usage: ``vllm_probe.py MODEL_DIR``.
"""

from __future__ import annotations

import sys


def main() -> int:
    from vllm import LLM, SamplingParams

    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=256)
    out = llm.generate(["hello"], SamplingParams(max_tokens=2, temperature=0.0))
    return 0 if out and out[0].outputs else 1


if __name__ == "__main__":
    sys.exit(main())
