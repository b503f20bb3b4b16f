"""``otel-rollout demo`` (docs/demo.md)."""

#: The demo's env classes (here, so ``--help`` needs no import of the demo's modules).
ENVS = ("gsm8k_multi_turn", "text2sql", "lcb")
