"""Shared by the SkyRL tests: a byte-level chat tokenizer built here (no download) and a
real HTTP server that answers SkyRL's remote inference client as vLLM's server does."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer():
    """A Qwen-style chat tokenizer: one token per byte, ``<|im_end|>`` as EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


class VLLMLikeServer:
    """A real HTTP server answering ``/inference/v1/generate`` as vLLM's does for SkyRL;
    each generate takes ``generate_s`` and each ``/finish_session`` ``finish_s``."""

    def __init__(self, tokenizer, *, generate_s: float = 0.0, finish_s: float = 0.0) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        rx = self
        answer = [*tokenizer.encode("#### 42", add_special_tokens=False), tokenizer.eos_token_id]

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                rx.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                body: dict = {}
                if self.path.startswith("/finish_session") and finish_s:
                    time.sleep(finish_s)
                if self.path == "/inference/v1/generate":
                    if generate_s:
                        time.sleep(generate_s)
                    lp = {"content": [{"logprob": -0.1}] * len(answer)}
                    body = {
                        "choices": [{"token_ids": answer, "finish_reason": "stop", "logprobs": lp}]
                    }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
