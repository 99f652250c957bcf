#!/usr/bin/env python3
"""PyTorch twin of train.rs (the burn example of this crate), for a like-for-like step time.

The same model, data, optimizer and loop as `cargo run --release -p xpu-burn --example train`:
a pre-norm transformer block on [batch, 16, 64] inputs (embedding Linear(64, 64); LayerNorm,
4-head self-attention, residual; LayerNorm, Linear(64, 256), GELU (exact, erf), Linear(256,
64), residual), mean-pooled over the sequence, Linear(64, 2) head; cross-entropy; Adam, lr
1e-3 with burn's defaults (betas 0.9/0.999, eps 1e-5). Each step draws a fresh batch on the
device: x ~ N(0, 1), label = (sum of feature 0 over the sequence > 0). The loss is read (a
device sync) every 10 steps and at the last; the step time is the mean over the steps after
5 warm-up steps, between two torch.cuda.synchronize() calls. Initialisation follows burn's:
every linear layer, attention projections included, weight and bias ~ U(-1/sqrt(fan_in),
1/sqrt(fan_in)); layer norms at weight 1, bias 0.

Prints the same lines as train.rs ("loss A -> B; T ms per step (after 5 warm-up steps)") and
fails (exit 1) unless the loss at the end is under half of the loss at the start.

Usage: python3 train_torch.py [--steps N] [--batch B] [--device cuda|cpu] [--need-weights]
(defaults: 300 steps, batch 64, CUDA when available, else the CPU). --need-weights makes the
attention also return its head-averaged weights (burn's attention computes its weights
anyway; PyTorch's default fused path does not).
"""

import argparse
import math
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F

SEQ = 16
D_MODEL = 64
HEADS = 4
CLASSES = 2
WARMUP = 5


def burn_uniform_(tensor, fan_in):
    """burn's default KaimingUniform(gain 1/sqrt(3)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        tensor.uniform_(-bound, bound)


class Block(nn.Module):
    """A pre-norm transformer block, mean-pooled, with a linear classifier head."""

    def __init__(self, need_weights=False):
        super().__init__()
        self.need_weights = need_weights
        self.embed = nn.Linear(D_MODEL, D_MODEL)
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, dropout=0.0, batch_first=True)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.ff1 = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.ff2 = nn.Linear(4 * D_MODEL, D_MODEL)
        self.gelu = nn.GELU()  # approximate="none": the erf form, as burn's Gelu
        self.head = nn.Linear(D_MODEL, CLASSES)
        # burn's initialisation (nn.Linear's default already has these bounds; the attention's
        # projections do not: xavier weights and zero biases).
        burn_uniform_(self.attn.in_proj_weight, D_MODEL)
        burn_uniform_(self.attn.in_proj_bias, D_MODEL)
        burn_uniform_(self.attn.out_proj.weight, D_MODEL)
        burn_uniform_(self.attn.out_proj.bias, D_MODEL)

    def forward(self, x):
        """[batch, SEQ, D_MODEL] to logits [batch, CLASSES]."""
        h = self.embed(x)
        n = self.norm1(h)
        a, _ = self.attn(n, n, n, need_weights=self.need_weights)
        h = h + a
        h = h + self.ff2(self.gelu(self.ff1(self.norm2(h))))
        return self.head(h.mean(dim=1))


def batch(size, device):
    """A batch of inputs and labels, generated on the device."""
    x = torch.randn(size, SEQ, D_MODEL, device=device)
    y = (x[:, :, 0].sum(dim=1) > 0).long()
    return x, y


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(steps, batch_size, device, need_weights):
    torch.manual_seed(42)
    model = Block(need_weights).to(device)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-5)
    first = last = 0.0
    window = []
    timed = 0.0
    warmup = min(steps, WARMUP)
    start = time.perf_counter()
    for step in range(steps):
        if step == warmup:
            sync(device)
            start = time.perf_counter()
        x, y = batch(batch_size, device)
        loss = F.cross_entropy(model(x), y)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        # Reading the loss every 10 steps (and at the ends) syncs the stream; the others don't.
        if step % 10 == 0 or step + 1 == steps:
            v = loss.item()
            window.append(v)
            if step == 0:
                first = v
            last = v
            print(f"step {step:4}  loss {v:.4f}", flush=True)
    sync(device)
    if steps > warmup:
        timed = (time.perf_counter() - start) * 1e3 / (steps - warmup)
    # The last reading alone is noisy: compare the mean of the last three readings.
    tail = window[-3:]
    end = sum(tail) / len(tail) if tail else last
    return first, end, timed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--need-weights", action="store_true")
    args = parser.parse_args()
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1")
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        print("train_torch: --device cuda but CUDA is not available", file=sys.stderr)
        return 1
    device = torch.device(name)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"training a transformer block ({SEQ}x{D_MODEL}, {HEADS} heads) on torch {torch.__version__} "
        f"{label} for {args.steps} steps, batch {args.batch}"
        f" (float32 matmul precision {torch.get_float32_matmul_precision()},"
        f" need_weights {args.need_weights})",
        flush=True,
    )
    first, end, step_ms = train(args.steps, args.batch, device, args.need_weights)
    print(f"loss {first:.4f} -> {end:.4f}; {step_ms:.3f} ms per step (after {WARMUP} warm-up steps)")
    if device.type == "cuda":
        print(
            f"peak memory allocated {torch.cuda.max_memory_allocated(device) / 2**20:.1f} MiB, "
            f"reserved {torch.cuda.max_memory_reserved(device) / 2**20:.1f} MiB"
        )
    if end < 0.5 * first:
        return 0
    print(f"train_torch: the loss did not fall by half ({first} -> {end})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
