"""Ops per vocoder decode step, counted on the CPU, with the data movement each one implies on a GPU.

A torch profile of one batch-64 step on the H200 (benchmarks/results/2026-11-22-decoder-profile-
bs64-h200.txt) spent most of its time moving data, not convolving: generic (non-vectorised)
elementwise kernels, cuDNN's NCHW<->NHWC conversions around every bf16 convolution, and cat copies
of the streaming state. All of these can be seen without a GPU from the ops the step issues and
the strides of their operands: the step runs here on the `meta` device (shapes and strides only,
no memory, no math) under a dispatch-mode counter. Per op it records:

- `launches`: ATen ops that run a kernel (views and metadata reads excluded); a SnakeBeta call
  counts once, as the fused Triton kernel it is on the GPU, and SDPA once (its CPU decomposition
  is not counted);
- `generic_elementwise`: pointwise ops (copies included) whose operands are not all laid out like
  the output: a broadcast per-channel vector, a strided view, a transposed operand. On CUDA these
  take TensorIterator's offset-calculator path (`elementwise_kernel<128, 4>`), not the vectorised one;
- `convs_channel_major_in`: convolutions whose input is not time-major ([B, C, T] stored as
  [B, T, C]): in bf16 cuDNN converts such an input to NHWC and its output back (`nchwToNhwc`,
  `nhwcToNchw`), two extra passes over the activation;
- `conv_bias_adds`: convolutions given a bias: PyTorch's cuDNN path adds it afterwards as a
  broadcast (generic) elementwise kernel over the whole output (not counted in `launches`);
- `cats`: torch.cat calls, and `moved_mb`: MB written by cats, copies and generic elementwise ops.

    python benchmarks/count_decoder_ops.py [--batch 64] [--frames 25] [--size full] [--out f.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checkpoint.configs import speech_tokenizer_config  # noqa: E402
from kernels import snakebeta  # noqa: E402
from vocoder_service.codec import Code2Wav, DecoderConfig, StreamingDecoder  # noqa: E402

# ATen ops that return views or read metadata: no kernel runs for them.
NO_LAUNCH = frozenset({
    "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.unsqueeze", "aten.squeeze", "aten.expand",
    "aten.slice", "aten.select", "aten.permute", "aten.as_strided", "aten.alias", "aten.detach", "aten.split",
    "aten.split_with_sizes", "aten.unbind", "aten.chunk", "aten._reshape_alias", "aten.lift_fresh", "aten.empty",
    "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided", "aten.unfold",
    "aten.diagonal", "aten.narrow", "aten.sym_size", "aten.sym_stride", "aten.is_same_size",
    "aten._local_scalar_dense", "aten.flatten", "aten.reshape", "aten.view_as", "aten.expand_as",
})
CONVS = frozenset({"aten.convolution", "aten.conv1d", "aten.conv2d", "aten.conv_transpose1d", "aten.conv_transpose2d"})
COPIES = frozenset({"aten.copy_", "aten.clone", "aten._to_copy", "aten.contiguous"})


def is_time_major(x: torch.Tensor) -> bool:
    """[B, C, T] (or [B, C, 1, T]) whose channels are adjacent in memory: stored as [B, T, C]."""
    return x.dim() >= 3 and (x.shape[1] == 1 or x.stride(1) == 1)


def same_layout(x: torch.Tensor, out: torch.Tensor) -> bool:
    """True when a vectorised kernel could read x alongside out: same shape, same strides, dense."""
    return tuple(x.shape) == tuple(out.shape) and x.stride() == out.stride() and _dense(out)


def _dense(x: torch.Tensor) -> bool:
    return x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last) or _permuted_dense(x)


def _permuted_dense(x: torch.Tensor) -> bool:
    order = sorted(range(x.dim()), key=lambda d: x.stride(d))
    expected = 1
    for d in order:
        if x.shape[d] != 1 and x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True


class StepOpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.launches: collections.Counter = collections.Counter()
        self.generic_elementwise = 0
        self.generic_by_op: collections.Counter = collections.Counter()
        self.moved_by_op: collections.Counter = collections.Counter()
        self.convs_channel_major_in = 0
        self.conv_bias_adds = 0
        self.cats = 0
        self.moved_bytes = 0
        self.paused = False

    def fused(self, name: str) -> None:
        """One launch of a fused kernel whose eager stand-in runs uncounted (see `paused`)."""
        self.launches[name] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if self.paused or name in NO_LAUNCH:
            return out
        self.launches[name] += 1
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        written = results[0] if results else None
        if name in CONVS:
            x, bias = args[0], args[2] if len(args) > 2 else kwargs.get("bias")
            self.convs_channel_major_in += int(not is_time_major(x))
            self.conv_bias_adds += int(bias is not None)
            if is_time_major(x) and not is_time_major(out):
                # The meta kernel always answers channel-major; cuDNN given a time-major (NHWC)
                # input returns a time-major output: model that, so later ops see CUDA's strides.
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        elif name == "aten.cat":
            self.cats += 1
            self._moved(name, written)
        elif written is not None and (torch.Tag.pointwise in func.tags or name in COPIES):
            generic = written.numel() > 1 and not all(same_layout(t, written) for t in tensors if t.numel() > 1)
            if generic:
                self.generic_elementwise += 1
                self.generic_by_op[name] += 1
            if generic or name in COPIES:
                self._moved(name, written)
        return out

    def _moved(self, name: str, written) -> None:
        self.moved_bytes += _nbytes(written)
        self.moved_by_op[name] += _nbytes(written)

    def report(self) -> dict:
        return {
            "launches": sum(self.launches.values()),
            "generic_elementwise": self.generic_elementwise,
            "convs_channel_major_in": self.convs_channel_major_in,
            "conv_bias_adds": self.conv_bias_adds,
            "cats": self.cats,
            "moved_mb": round(self.moved_bytes / 1e6, 1),
            "by_op": dict(self.launches.most_common()),
            "generic_by_op": dict(self.generic_by_op.most_common()),
            "moved_mb_by_op": {k: round(v / 1e6, 1) for k, v in self.moved_by_op.most_common()},
        }


def _nbytes(x) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


class FusedCalls(TorchFunctionMode):
    """SDPA counted once (one fused kernel on CUDA), its meta/CPU decomposition not at all."""

    def __init__(self, counter: StepOpCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            return _uncounted(self.counter, "sdpa", func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


def _uncounted(counter: StepOpCounter, name: str, func, args, kwargs):
    counter.fused(name)
    counter.paused = True
    try:
        return func(*args, **kwargs)
    finally:
        counter.paused = False


def build_meta_decoder(size: str, batch: int) -> StreamingDecoder:
    config = DecoderConfig.from_dict(speech_tokenizer_config(size)["decoder_config"])
    with torch.device("meta"):
        model = Code2Wav(config)
    model.prepare()
    model = model.to(torch.bfloat16).eval().requires_grad_(False)
    return StreamingDecoder(model, max_slots=batch)


def count_step(decoder: StreamingDecoder, batch: int, frames: int) -> dict:
    device = decoder.device
    codes = torch.zeros((batch, decoder.num_quantizers, frames), dtype=torch.int64, device=device)
    slots = torch.arange(batch, device=device)
    lengths = torch.full((batch,), frames, dtype=torch.int64, device=device)
    counter = StepOpCounter()
    real_snake = snakebeta.snake_beta

    def snake_once(*args, **kwargs):  # the Triton kernel on the GPU: one launch
        return _uncounted(counter, "triton.snake_beta", real_snake, args, kwargs)

    snakebeta.snake_beta = snake_once
    try:
        with FusedCalls(counter), counter:
            decoder.step_unchecked(codes, slots, lengths)
    finally:
        snakebeta.snake_beta = real_snake
    return counter.report()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="full")
    p.add_argument("--batch", type=int, action="append", help="repeatable; default 64 and 1")
    p.add_argument("--frames", type=int, action="append", help="one per --batch; default 25 and 2")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    batches = args.batch or [64, 1]
    frames = args.frames or [25, 2][: len(batches)] + [25] * max(0, len(batches) - 2)
    if len(frames) != len(batches):
        p.error("give one --frames per --batch")
    rows = []
    for batch, num_frames in zip(batches, frames):
        decoder = build_meta_decoder(args.size, batch)
        row = {"batch": batch, "frames": num_frames, **count_step(decoder, batch, num_frames)}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict)}))
        for key in ("by_op", "generic_by_op", "moved_mb_by_op"):
            print(f"  {key}: " + ", ".join(f"{k.removeprefix('aten.')} {v}" for k, v in row[key].items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"size": args.size, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
