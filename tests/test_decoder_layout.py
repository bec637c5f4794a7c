"""The decoder's activation layouts (vocoder_service/codec/layout.py): the setting, the helpers, and
that a time-major decoder keeps every conv of its stack time-major through a streaming step (a cat
or pad that silently returned a channel-major copy would bring cuDNN's transposes back)."""
from __future__ import annotations

import pytest
import torch

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder
from vocoder_service.codec import layout
from vocoder_service.codec.convs import CausalConv1d, CausalConvTranspose1d
from vocoder_service.codec.derived_weights import ChannelsLastWeight
from vocoder_service.codec.layout import cat_time, empty_in_layout, is_time_major, to_time_major


@pytest.mark.parametrize("value, expected", [(None, layout.DEFAULT_LAYOUT == "time-major"),
                                             ("", layout.DEFAULT_LAYOUT == "time-major"),
                                             ("time-major", True), ("channel-major", False), (" time-major ", True)])
def test_layout_setting(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(layout.LAYOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(layout.LAYOUT_ENV, value)
    assert layout.default_time_major() is expected


def test_unknown_layout_is_refused_by_name(monkeypatch):
    from checkpoint.configs import speech_tokenizer_config
    from vocoder_service.codec.config import DecoderConfig
    from vocoder_service.codec.model import Code2Wav

    monkeypatch.setenv(layout.LAYOUT_ENV, "nhwc")
    with pytest.raises(ValueError, match=r"QWEN3_TTS_VOCODER_LAYOUT must be one of time-major, channel-major, got 'nhwc'"):
        Code2Wav(DecoderConfig.from_dict(speech_tokenizer_config("tiny")["decoder_config"]))


def test_helpers_keep_values_and_choose_the_layout():
    x = torch.randn(2, 5, 7)
    tm = to_time_major(x)
    assert is_time_major(tm) and not is_time_major(x) and torch.equal(tm, x)
    assert to_time_major(tm) is tm
    assert is_time_major(empty_in_layout(tm)) and empty_in_layout(x).is_contiguous()
    tail = torch.randn(2, 5, 3)
    for new in (x, tm):
        joined = cat_time([tail, new])
        assert torch.equal(joined, torch.cat([tail, x], dim=-1))
        assert is_time_major(joined) == is_time_major(new)
    # one channel or one sample: both layouts are the same memory, and neither counts as time-major
    assert not is_time_major(torch.randn(2, 1, 9)) and not is_time_major(torch.randn(2, 9, 1))


def test_channels_last_filter_follows_weight_edits():
    weight = torch.randn(6, 4, 3)
    cache = ChannelsLastWeight()
    first = cache.get(weight)
    assert first.shape == (6, 4, 1, 3) and first.is_contiguous(memory_format=torch.channels_last)
    assert cache.get(weight) is first  # no copy per call
    with torch.no_grad():
        weight.mul_(2)  # an in-place edit (a reload) bumps the version
    assert torch.equal(cache.get(weight)[:, :, 0], weight)


def _conv_input_layouts(model, codes, frames_per_step):
    """(module name, input time-major?) for every conv call of the last streaming step."""
    seen = []
    hooks = [module.register_forward_hook(lambda mod, args, out, name=name: seen.append((name, is_time_major(args[0]))))
             for name, module in model.named_modules() if isinstance(module, (CausalConv1d, CausalConvTranspose1d))]
    try:
        decoder = StreamingDecoder(model, max_slots=2)
        decoder.step(codes[:, :, :2], [0, 1])
        seen.clear()
        decoder.step(codes[:, :, 2 : 2 + frames_per_step], [0, 1], torch.tensor([frames_per_step, frames_per_step - 1]))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("frames_per_step", [2, 7])
def test_time_major_stack_stays_time_major(frames_per_step):
    """From the upsampler to the last conv (34 in all), every conv is fed time-major in time-major mode (the
    short first-stage inputs that go through a cat included), and none in channel-major mode."""
    model = tiny_code2wav()
    codes = random_codes(2, 12, seed=3)
    model.time_major = True
    layouts = dict(_conv_input_layouts(model, codes, frames_per_step))
    stack = {name: tm for name, tm in layouts.items() if name.startswith(("upsample", "decoder"))}
    assert len(stack) == 34 and all(stack.values()), [name for name, tm in stack.items() if not tm]
    model.time_major = False
    stack = {name: tm for name, tm in _conv_input_layouts(model, codes, frames_per_step)
             if name.startswith(("upsample", "decoder"))}
    assert len(stack) == 34 and not any(stack.values())
