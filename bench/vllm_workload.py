"""A shared-prefix workload on real vLLM (CPU) with a tiny model built offline: the command the
vLLM tests, the vLLM A/B and the docs run.

Run it with the vLLM environment's Python (``make venv-vllm``: ``.venv-vllm/bin/python``).
With ``FDPROF_RUN_DIR`` set, fdprof's vLLM plugin records every vLLM process there. The model
(a 2-layer Llama, random weights, seeded) and a word-level tokenizer are built into
``--model-dir`` on first use: nothing comes from a model hub.

The workload is three rounds of greedy generations, each round one ``generate`` call: K
prompts sharing K long prefixes, then filler prompts that push those prefixes out of a small
GPU block pool, then the K prefixes again with new suffixes. With offloading, the third round
loads the prefixes back from the host pool; a store that read its blocks before the step
wrote them (``--offload-fault``) hands those requests wrong KV, so their tokens and logprobs
differ from a run without offloading. ``--outputs`` writes every request's tokens and
logprobs as JSON for that comparison.

Usage: ``python bench/vllm_workload.py --model-dir DIR [--offload async|sync]
[--offload-fault store-before-compute] [--no-prefix-caching] [--multiprocess]
[--outputs FILE] [--take-turns DIR I N]``; ``--build-model`` only builds the model.
``--take-turns DIR I N``: run I of N started together (each given the same DIR) generates its
rounds in turn with the others, round by round (run 0's first round, run 1's, ..., run 0's
second round, ...), once all N have started vLLM: runs compared step by step then meet the
machine's load alike, a second apart, and never compete with each other for its cores (two at
once on two shared cores ran one of a pair of identical runs 4x slower than the other).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

#: vLLM's CPU attention backend takes block sizes in multiples of 32
BLOCK_SIZE = 32
VOCAB_WORDS = 500
SPECIAL = ["<unk>", "<s>", "</s>"]


def build_tiny_model(model_dir: Path, seed: int = 0) -> Path:
    """A 2-layer Llama with random (seeded) weights and a word-level tokenizer, saved as a
    Hugging Face model directory. Weights are drawn wide (initializer_range 0.5) so greedy
    choices have clear margins and do not flip on float rounding."""
    if (model_dir / "config.json").exists():
        return model_dir
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    model_dir.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(SPECIAL + [f"w{i}" for i in range(VOCAB_WORDS)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(model_dir)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.5,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(model_dir)
    return model_dir


def rounds(seed: int, prefixes: int, prefix_blocks: int, fillers: int) -> list[list[str]]:
    """The three rounds of prompts (module doc). Word ids avoid the special tokens, so no
    prompt holds an end-of-sequence token."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(n))

    shared = [words(prefix_blocks * BLOCK_SIZE) for _ in range(prefixes)]
    first = [f"{p} {words(12)}" for p in shared]
    filler = [words(prefix_blocks * BLOCK_SIZE + 12) for _ in range(fillers)]
    again = [f"{p} {words(9)}" for p in shared]
    return [first, filler, again]


#: the pressure workload's phases: (name, what it makes vLLM do)
PRESSURE_PHASES = {
    "prefill-finish": "requests on shared prefixes that finish in their prefill step "
    "(max_tokens=1): their stores are deferred to the next step, after their blocks are freed",
    "reuse": "new requests that need those blocks at once: a small pool reallocates blocks "
    "whose stores are still deferred, which vLLM fences before the forward",
    "shared": "concurrent requests on one prefix (hits in the step that computes it)",
    "revive": "that prefix again once its requests are done: hits revive freed blocks",
    "preempt": "long generations that outgrow the pool: vLLM preempts and recomputes",
    "reload": "the first prefixes again beside new requests: loads back from the host pool "
    "while other requests run",
}


def pressure(seed: int) -> list[tuple[str, list[str], int]]:
    """The pressure workload: (phase, prompts, max_tokens) per ``generate`` call
    (:data:`PRESSURE_PHASES`)."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(n))

    prefixes = [words(2 * BLOCK_SIZE) for _ in range(3)]
    first = [f"{p} {words(12)}" for p in prefixes for _ in range(2)]
    reuse = [words(2 * BLOCK_SIZE + 12) for _ in range(4)]
    one = words(3 * BLOCK_SIZE)
    shared = [f"{one} {words(5)}" for _ in range(6)]
    long = [words(BLOCK_SIZE + 20) for _ in range(8)]
    reload = [f"{p} {words(9)}" for p in prefixes] + [words(BLOCK_SIZE + 12) for _ in range(3)]
    revive = [f"{one} {words(7)}" for _ in range(2)]
    return [("prefill-finish", first, 1), ("reuse", reuse, 4), ("shared", shared, 6),
            ("revive", revive, 3), ("preempt", long, 72), ("reload", reload, 6)]  # fmt: skip


def calls(args: argparse.Namespace) -> list[tuple[str, list[str], int]]:
    """The workload's ``generate`` calls: (label, prompts, max_tokens)."""
    if args.workload == "pressure":
        return pressure(args.seed)
    return [(f"round{i}", prompts, args.max_tokens)
            for i, prompts in enumerate(rounds(args.seed, args.prefixes, args.prefix_blocks,
                                                args.fillers))]  # fmt: skip


class Turns:
    """``--take-turns DIR I N``: run ``I`` of ``N`` generates its rounds in turn (module doc).
    A run marks its start (``started-I``) and each round it finished (``done-T``, T its turn);
    turn T opens when T rounds are done."""

    TIMEOUT_S = 900.0

    def __init__(self, folder: Path, index: int, count: int) -> None:
        self.folder, self.index, self.count = folder, index, count
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"started-{index}").touch()
        self._wait(lambda: len(list(folder.glob("started-*"))) >= count, "start")

    @contextmanager
    def round(self, number: int) -> Iterator[None]:
        """Round ``number`` of this run: entered on its turn, the turn passed on at exit."""
        turn = number * self.count + self.index
        self._wait(lambda: len(list(self.folder.glob("done-*"))) >= turn, f"turn {turn}")
        try:
            yield
        finally:
            (self.folder / f"done-{turn}").touch()

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                raise SystemExit(f"--take-turns: {what} did not come in {self.TIMEOUT_S:g} s")
            time.sleep(0.01)


def engine_args(args: argparse.Namespace) -> dict:
    """``LLM(...)`` keyword arguments for this configuration."""
    kwargs = dict(
        model=str(args.model_dir),
        dtype="float32",
        max_model_len=args.max_model_len,
        enforce_eager=True,
        max_num_seqs=8,
        block_size=BLOCK_SIZE,
        enable_prefix_caching=args.prefix_caching,
        num_gpu_blocks_override=args.gpu_blocks,
        seed=args.seed,
    )
    if args.offload != "none":
        extra = {
            "spec_name": "ThreadedCPUOffloadingSpec",
            "spec_module_path": "fdprof.adapters.vllm.offload",
            "cpu_bytes_to_use": 64 << 20,
            "store_mode": args.offload,
        }
        if args.offload_fault:
            extra["fault"] = args.offload_fault
        if args.copy_delay_ms:
            extra["copy_delay_ms"] = args.copy_delay_ms
        kwargs["kv_transfer_config"] = {
            "kv_connector": "ThreadedOffloadingConnector",
            "kv_connector_module_path": "fdprof.adapters.vllm.offload",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        }
    return kwargs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--offload", choices=["none", "async", "sync"], default="none",
                    help="KV offloading to a host pool: stores on a background thread "
                         "(async), or copied inline before the step returns (sync)")  # fmt: skip
    ap.add_argument("--offload-fault", choices=["store-before-compute"], default=None)
    ap.add_argument("--copy-delay-ms", type=float, default=0,
                    help="each host copy takes this much longer (a slow link)")  # fmt: skip
    ap.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    ap.add_argument("--multiprocess", action="store_true",
                    help="vLLM's own process layout (engine core, worker processes)")  # fmt: skip
    ap.add_argument("--prefixes", type=int, default=4)
    ap.add_argument("--prefix-blocks", type=int, default=3)
    ap.add_argument("--fillers", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--gpu-blocks", type=int, default=24,
                    help="KV blocks in vLLM's (device) pool: small, so fillers evict")  # fmt: skip
    ap.add_argument("--workload", choices=["rounds", "pressure"], default="rounds",
                    help="rounds: the three rounds above; pressure: the phases of "
                         "PRESSURE_PHASES, on a pool of --gpu-blocks")  # fmt: skip
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--outputs", type=Path, default=None)
    ap.add_argument("--take-turns", nargs=3, metavar=("DIR", "I", "N"), default=None,
                    help="run I of N started together: one round at a time, in turn")  # fmt: skip
    ap.add_argument("--build-model", action="store_true",
                    help="only build the model (for runs started together)")  # fmt: skip
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if args.multiprocess else "0"
    build_tiny_model(args.model_dir, args.seed)
    if args.build_model:
        return 0

    from vllm import LLM, SamplingParams

    llm = LLM(**engine_args(args))
    turns = None
    if args.take_turns:
        turns = Turns(Path(args.take_turns[0]), int(args.take_turns[1]), int(args.take_turns[2]))
    results = []
    for number, (label, prompts, max_tokens) in enumerate(calls(args)):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=1,
                                ignore_eos=True)  # fmt: skip
        with turns.round(number) if turns else nullcontext():
            outs = llm.generate(prompts, params, use_tqdm=False)
        for prompt, out in zip(prompts, outs, strict=True):
            done = out.outputs[0]
            results.append({
                "round": number,
                "phase": label,
                "prompt_tokens": len(out.prompt_token_ids),
                "cached_tokens": out.num_cached_tokens or 0,
                "tokens": list(done.token_ids),
                "logprobs": [lp[t].logprob for t, lp in zip(done.token_ids, done.logprobs,
                                                             strict=True)],
                "prompt": prompt[:40],
            })  # fmt: skip
    if args.outputs:
        args.outputs.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # vLLM's CPU platform spawns its processes
    sys.exit(main())
