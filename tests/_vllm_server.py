"""A real vLLM server (the CPU build) for the tests, in its own environment.

vLLM pins another transformers than the project, so it lives in a separate virtual environment
that ``bash scripts/setup.sh --server-tests`` builds (``$HALLUPROBE_VLLM_VENV``, default
``~/.cache/halluprobe/vllm-venv``). :func:`skip_reason` says why the tests cannot run here
(None when they can). :func:`build_tiny_llama` saves a random-weight text-only LLaMA (hidden
128, 2 layers, the Mistral v1 tokenizer with a one-turn chat template) with the project's
transformers; :class:`VllmServer` runs ``vllm serve`` on it on 127.0.0.1.

Measured here (2 shared cores): the engine starts in about 90 s, the first request takes about
60 s more (compilation), later ones well under a second.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import _assets

__all__ = ["CHAT_TEMPLATE", "VllmServer", "build_tiny_llama", "reference_first_token", "skip_reason", "vllm_python"]

# one user turn; BOS written by the template (vLLM tokenizes a chat prompt without special tokens)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "[INST] {{ message['content'] }} [/INST]{% endif %}{% endfor %}"
)


def vllm_python() -> Path:
    """The vLLM environment's interpreter (it may not exist)."""
    root = os.environ.get("HALLUPROBE_VLLM_VENV") or str(Path.home() / ".cache" / "halluprobe" / "vllm-venv")
    return Path(root) / "bin" / "python"


def skip_reason(*, import_check: bool = True) -> str | None:
    """Why the real vLLM tests cannot run here; None when they can. ``import_check``: also import
    vllm there (several seconds: not at collection time)."""
    python = vllm_python()
    if not python.is_file():
        return f"no vLLM environment at {python.parent.parent}: build it with `bash scripts/setup.sh --vllm-tests` (or --server-tests)"
    if not import_check:
        return None
    probe = subprocess.run([str(python), "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"vllm does not import in {python}: {tail}"
    return None


def build_tiny_llama(out: Path, seed: int = 0) -> Path:
    """A random-weight LLaMA (hidden 128, 2 layers, head 64) with the Mistral v1 tokenizer, saved to ``out``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(_assets.mistral_tokenizer_dir("v1")), local_files_only=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
        torch_dtype="float32",
    )  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # a wider spread of logits than the default init: answers differ by prompt
        model.lm_head.weight.mul_(20.0)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(out)
    return out


def reference_first_token(
    model_dir: Path, prompts: list[str], ids: list[int], max_new_tokens: int, stops: tuple[str, ...] = (".", "\n")
) -> list[tuple[dict[str, float], int, str]]:
    """The hf backend's computation on the same weights, per prompt: the chat prompt, the first
    step's log-softmax over the whole vocabulary read at ``ids`` (keyed by ``str(id)``), its
    argmax, and the greedy text cut before the first stop string (as a server returns it)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids).logits[0, -1].float(), dim=-1)
            generated = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        greedy = tokenizer.decode(generated[0, input_ids.shape[1] :], skip_special_tokens=True)
        for stop in stops:
            greedy = greedy.split(stop, 1)[0]
        out.append(({str(i): float(logprobs[i]) for i in ids}, int(torch.argmax(logprobs)), greedy))
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VllmServer:
    """``vllm serve MODEL`` on 127.0.0.1 (float32, eager, 512 tokens, prefix caching on); stops on exit."""

    def __init__(self, model_dir: Path, log_path: Path, *, name: str = "tiny-llama", start_timeout_s: float = 420.0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.name = name
        self.log_path = log_path
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONPATH": ""}  # fmt: skip
        command = [
            # `vllm serve` looks up the distribution "vllm", which the CPU build names "vllm-cpu":
            # the API server module is the same server without that lookup
            str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(self.port),
            "--served-model-name", name, "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
            "--max-logprobs", "128", "--enable-prefix-caching", "--seed", "0",
        ]  # fmt: skip
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._wait(start_timeout_s)

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self._proc.returncode}): {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(2)
        self.stop()
        raise RuntimeError(f"vllm serve not ready within {timeout_s:.0f}s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()  # our own child only, by its id
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        self._log.close()

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

