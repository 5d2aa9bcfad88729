"""The model: a small decoder with seeded random weights whose attention reads and writes a paged
KV cache through block tables, and the dense reference that checks it.

The KV pool is one tensor ``[layers, 2, num_blocks, block_size, kv_heads, head_dim]``: layer
``l``'s K is ``pool[l, 0]`` and V ``pool[l, 1]``, each ``[num_blocks, block_size, kv_heads,
head_dim]``. Sequences are batched for the projections and the MLP; attention runs per sequence
over the blocks of its table (a loop over at most ``max_batch`` sequences).

Batch invariance: a token's logits must not depend on what else is in its batch, or a run's
tokens could not be compared with a reference run whose batches formed differently. On the CPU
(MKL, one thread) a matrix product's rows are bit-identical for any row count from 8 up, not
below, so every product here sees at least :data:`MIN_ROWS` rows (zero rows pad it).

Tensor parallelism (``tp`` ranks, Megatron's split): each rank holds its share of the heads
(and of the KV heads: its shard of the pool) and of the MLP's hidden units; the attention
output and MLP down projections are row-parallel and summed over the ranks by an all-reduce.

Expert parallelism (``ep``, DP attention + EP experts as in DeepSeek-style serving): every DP
group's worker runs the whole attention for its own requests, and each layer's MLP is a mixture
of experts (top-1 gate) whose experts are split across the groups' workers. Tokens go to their
expert's worker and back by all-to-all; a worker with no requests still joins every exchange
with no tokens (:meth:`Decoder.join_empty`), so the collectives stay matched.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from fdprof.engine.collectives import Collective
from fdprof.engine.config import EngineConfig

#: fewest rows a matrix product is given (see the module docstring)
MIN_ROWS = 8


@dataclass(frozen=True)
class SeqInput:
    """One sequence of a batch: the tokens to compute, the position of the first, its blocks."""

    tokens: list[int]
    start: int
    block_table: list[int]


def _padded(x: torch.Tensor) -> torch.Tensor:
    """``x`` with zero rows appended up to :data:`MIN_ROWS` rows."""
    n = x.shape[0]
    return x if n >= MIN_ROWS else torch.cat([x, x.new_zeros(MIN_ROWS - n, *x.shape[1:])])


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w``, bit-identical per row whatever the row count."""
    return (_padded(x) @ w)[: x.shape[0]]


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _positions(pos: torch.Tensor, dim: int) -> torch.Tensor:
    freqs = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    ang = pos.to(torch.float32)[:, None] * freqs.to(pos.device)[None, :]
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int) -> torch.Tensor:
    """Causal attention of ``q`` [n, heads, d] at positions ``q_start..`` over ``k``/``v``
    [ctx, kv_heads, d] at positions ``0..ctx``. Two batched products over the heads, read in
    place from ``k``/``v`` (no copies, no einsum); a single query (a decode step's) is the
    last position and sees every key, so only several queries build a mask."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    n, ctx = q.shape[0], k.shape[0]
    rows = _padded(q).transpose(0, 1)  # [heads, >= MIN_ROWS, d]
    scores = torch.matmul(rows, k.permute(1, 2, 0)) / math.sqrt(q.shape[-1])
    if n > 1:
        later = torch.ones(rows.shape[1], ctx, dtype=torch.bool, device=q.device)
        scores.masked_fill_(later.triu_(q_start + 1), float("-inf"))
    return torch.matmul(scores.softmax(-1), v.transpose(0, 1))[:, :n].transpose(0, 1)


# attention over one layer: (layer, q, k, v) -> output, each [tokens, heads|kv_heads, head_dim]
Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _cols(w: torch.Tensor, rank: int, ranks: int) -> torch.Tensor:
    n = w.shape[1] // ranks
    return w[:, rank * n : (rank + 1) * n].contiguous()


def _rows(w: torch.Tensor, rank: int, ranks: int) -> torch.Tensor:
    n = w.shape[0] // ranks
    return w[rank * n : (rank + 1) * n].contiguous()


class Decoder:
    """The model, or TP rank ``tp_rank``'s share of it (``tp`` from the config); ``tp_group``
    sums the ranks' partial outputs (None: a single rank). With ``cfg.ep``, ``ep_group`` is
    the collective of the DP groups' workers and this worker holds the experts of its rank."""

    def __init__(
        self,
        cfg: EngineConfig,
        device: str | torch.device = "cpu",
        tp_rank: int = 0,
        tp_group: Collective | None = None,
        ep_group: Collective | None = None,
    ) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.tp_group = tp_group
        self.ep_group = ep_group
        if cfg.ep and ep_group is None:
            raise ValueError("an expert-parallel model needs its expert-parallel group")
        self.heads, self.kv_heads = cfg.heads // cfg.tp, cfg.kv_heads // cfg.tp
        g = torch.Generator().manual_seed(cfg.seed)
        h, hd, t, tp = cfg.hidden, cfg.head_dim, tp_rank, cfg.tp

        def w(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, generator=g) / math.sqrt(rows)

        def mlp() -> dict[str, torch.Tensor]:
            if not cfg.ep:
                return {"w1": _cols(w(h, 2 * h), t, tp), "w2": _rows(w(2 * h, h), t, tp)}
            layer = {"gate": w(h, cfg.experts)}
            for e in range(cfg.experts):  # every expert drawn, so weights match on every rank
                w1, w2 = w(h, 2 * h), w(2 * h, h)
                if e // cfg.experts_per_rank == ep_group.rank:
                    layer[f"w1.{e}"], layer[f"w2.{e}"] = w1, w2
            return layer

        def on_device(layer: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.to(self.device) for k, v in layer.items()}

        self.embed = torch.randn(cfg.vocab, h, generator=g).to(self.device)
        self.layers = [
            on_device(
                {
                    "wq": _cols(w(h, cfg.heads * hd), t, tp),
                    "wk": _cols(w(h, cfg.kv_heads * hd), t, tp),
                    "wv": _cols(w(h, cfg.kv_heads * hd), t, tp),
                    "wo": _rows(w(cfg.heads * hd, h), t, tp),
                    **mlp(),
                }
            )
            for _ in range(cfg.layers)
        ]
        self.local_experts = [
            e for e in range(cfg.experts if cfg.ep else 0) if f"w1.{e}" in self.layers[0]
        ]
        self.lm_head = w(h, cfg.vocab).to(self.device)

    def _reduce(self, partial: torch.Tensor) -> torch.Tensor:
        """The sum of the TP ranks' partial outputs (a rank's own, alone)."""
        return partial if self.tp_group is None else self.tp_group.all_reduce(partial)

    def _mlp(self, p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The MLP's output for rows ``x`` (already normalised)."""
        if not self.cfg.ep:
            return self._reduce(_mm(torch.nn.functional.gelu(_mm(x, p["w1"])), p["w2"]))
        return self._experts(p, x)

    def _experts(self, p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Top-1 mixture of experts: each row to its expert's worker, through it, and back."""
        group, per = self.ep_group, self.cfg.experts_per_rank
        route = _mm(x, p["gate"])
        expert = route.argmax(-1)
        weight = route.softmax(-1).gather(1, expert[:, None])
        dest = expert // per
        order = torch.argsort(dest, stable=True)
        send = torch.bincount(dest, minlength=group.size)
        recv = group.all_to_all(send.view(-1, 1), [1] * group.size, [1] * group.size).view(-1)
        send_counts, recv_counts = send.tolist(), recv.tolist()
        rows = group.all_to_all(x[order], send_counts, recv_counts)
        # the gate again here: row-invariant products give the sender's choice exactly
        mine = _mm(rows, p["gate"]).argmax(-1)
        out = torch.zeros_like(rows)
        for e in self.local_experts:
            sel = (mine == e).nonzero().view(-1)
            if len(sel):
                h = torch.nn.functional.gelu(_mm(rows[sel], p[f"w1.{e}"]))
                out[sel] = _mm(h, p[f"w2.{e}"])
        back = group.all_to_all(out, recv_counts, send_counts)
        y = torch.empty_like(back)
        y[order] = back
        return weight * y

    def _hidden(self, tokens: torch.Tensor, pos: torch.Tensor, attend: Attention) -> torch.Tensor:
        cfg = self.cfg
        x = self.embed[tokens] + _positions(pos, cfg.hidden)
        n = x.shape[0]
        for li, p in enumerate(self.layers):
            a = _rms(x)
            q = _mm(a, p["wq"]).view(n, self.heads, cfg.head_dim)
            k = _mm(a, p["wk"]).view(n, self.kv_heads, cfg.head_dim)
            v = _mm(a, p["wv"]).view(n, self.kv_heads, cfg.head_dim)
            x = x + self._reduce(_mm(attend(li, q, k, v).reshape(n, -1), p["wo"]))
            x = x + self._mlp(p, _rms(x))
        return _rms(x)

    def join_empty(self) -> None:
        """A step with no tokens: this worker's part of every layer's expert exchange."""
        x = torch.zeros(0, self.cfg.hidden, device=self.device)
        for p in self.layers:
            self._experts(p, x)

    def forward_paged(
        self,
        pool: torch.Tensor,
        seqs: list[SeqInput],
        around_layer: Callable[[int], AbstractContextManager] | None = None,
    ) -> torch.Tensor:
        """Write the K/V of every sequence's new tokens into its blocks, attend over the blocks,
        and return the logits of each sequence's last token ``[len(seqs), vocab]``.
        ``around_layer(l)``, if given, wraps layer ``l``'s accesses to the pool (Cache Manager
        V1's worker waits there for the layer's swap-in and records the layer's span)."""
        bs = self.cfg.block_size
        dev = self.device
        tokens, pos, blocks, offs = [], [], [], []
        for s in seqs:
            for i, t in enumerate(s.tokens):
                p = s.start + i
                tokens.append(t)
                pos.append(p)
                blocks.append(s.block_table[p // bs])
                offs.append(p % bs)
        blk = torch.tensor(blocks, device=dev)
        off = torch.tensor(offs, device=dev)
        # every sequence's blocks in use, one after another: one gather of K and V per layer
        # for the whole batch (each sequence's part starts on a block boundary, as its own
        # gather did), not two per sequence
        ctxs = [s.start + len(s.tokens) for s in seqs]
        n_blocks = [(ctx + bs - 1) // bs for ctx in ctxs]
        used = torch.tensor([b for s, n in zip(seqs, n_blocks, strict=True)
                             for b in s.block_table[:n]], device=dev)  # fmt: skip
        firsts = [0, *itertools.accumulate(n_blocks)]

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            with around_layer(li) if around_layer else contextlib.nullcontext():
                return attend_paged(li, q, k, v)

        def attend_paged(li: int, q, k, v) -> torch.Tensor:
            kc, vc = pool[li, 0], pool[li, 1]
            kc[blk, off] = k
            vc[blk, off] = v
            # index_select, not pool[li][:, used]: the same copy, a quarter of the time
            kv = pool[li].index_select(1, used)
            outs, row = [], 0
            for s, ctx, lo, hi in zip(seqs, ctxs, firsts[:-1], firsts[1:], strict=True):
                n = len(s.tokens)
                ks = kv[0, lo:hi].reshape(-1, k.shape[1], k.shape[2])[:ctx]
                vs = kv[1, lo:hi].reshape(-1, v.shape[1], v.shape[2])[:ctx]
                outs.append(_attend(q[row : row + n], ks, vs, s.start))
                row += n
            return torch.cat(outs)

        x = self._hidden(torch.tensor(tokens, device=dev), torch.tensor(pos, device=dev), attend)
        last = torch.tensor([len(s.tokens) for s in seqs], device=dev).cumsum(0) - 1
        return _mm(x[last], self.lm_head)

    def forward_dense(self, tokens: list[int]) -> torch.Tensor:
        """Reference: logits of every position of one sequence, attention over plain tensors."""
        t = torch.tensor(tokens, device=self.device)

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return _attend(q, k, v, 0)

        x = self._hidden(t, torch.arange(len(tokens), device=self.device), attend)
        return _mm(x, self.lm_head)
