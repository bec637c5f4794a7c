"""The tiny checkpoint maker: official layout, official loaders accept it, deterministic, sane values."""
from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from checkpoint import layout
from checkpoint.configs import MODEL_TYPES, generation_config, model_config, speech_tokenizer_config
from checkpoint.tiny import main, make_tiny_checkpoint
from checkpoint.tiny_init import init_tensor
from oracle import import_oracle


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {t: make_tiny_checkpoint(root / t, t, seed=0) for t in MODEL_TYPES}


def _digests(directory) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_writes_exact_layout_configs_and_dtypes(tiny_dirs, model_type):
    root = tiny_dirs[model_type]
    assert sorted(_digests(root)) == sorted(layout.REQUIRED_FILES)
    assert json.loads((root / "config.json").read_text()) == model_config(model_type, "tiny")
    assert json.loads((root / "generation_config.json").read_text()) == generation_config()
    st_config = json.loads((root / "speech_tokenizer/config.json").read_text())
    assert st_config == speech_tokenizer_config("tiny")
    with safe_open(str(root / "model.safetensors"), framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert shapes == layout.expected_tensor_shapes(model_config(model_type, "tiny"))
    with safe_open(str(root / "speech_tokenizer/model.safetensors"), framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
    assert shapes == layout.expected_speech_tokenizer_shapes(st_config)


def test_same_seed_is_byte_identical_and_other_seed_differs(tiny_dirs, tmp_path):
    again = make_tiny_checkpoint(tmp_path / "again", "custom_voice", seed=0)
    assert _digests(again) == _digests(tiny_dirs["custom_voice"])
    other = make_tiny_checkpoint(tmp_path / "other", "custom_voice", seed=1)
    a, b = _digests(other), _digests(tiny_dirs["custom_voice"])
    assert a["model.safetensors"] != b["model.safetensors"]
    assert a["speech_tokenizer/model.safetensors"] != b["speech_tokenizer/model.safetensors"]
    assert a["vocab.json"] == b["vocab.json"]  # the tokenizer does not depend on the seed


def test_values_follow_the_init_rules(tiny_dirs):
    model = load_file(str(tiny_dirs["base"] / "model.safetensors"))
    codec = load_file(str(tiny_dirs["base"] / "speech_tokenizer/model.safetensors"))
    for name, value in {**model, **codec}.items():
        assert torch.isfinite(value.float()).all(), name
    usage = [v for k, v in codec.items() if k.endswith("cluster_usage")]
    assert len(usage) == 16 + 32 and all(bool((u == 1).all()) for u in usage)
    assert all(bool((v == 1).all()) for k, v in codec.items() if k.endswith("codebook.initialized"))
    book = codec["decoder.quantizer.rvq_rest.vq.layers.3._codebook.embedding_sum"]
    assert 0.9 < book.std().item() < 1.1
    assert bool((codec["decoder.pre_transformer.layers.0.mlp_layer_scale.scale"] == 0.01).all())
    log_alpha = codec["decoder.decoder.1.block.0.alpha"]
    assert log_alpha.abs().max().item() < 0.6 and log_alpha.std().item() > 0.01  # exp(.) ~ 1, not all equal
    norm = model["talker.model.norm.weight"].float()
    assert abs(norm.mean().item() - 1.0) < 0.1
    q = model["talker.model.layers.0.self_attn.q_proj.weight"].float()  # [out, in=48]
    assert abs(q.std().item() - 1 / math.sqrt(48)) < 0.02
    assert model["talker.model.text_embedding.weight"].shape == (151936, 32)


def test_init_is_per_tensor_and_seeded():
    a = init_tensor("talker.codec_head.weight", (8, 4), seed=0)
    assert torch.equal(a, init_tensor("talker.codec_head.weight", (8, 4), seed=0))
    assert not torch.equal(a, init_tensor("talker.codec_head.weight", (8, 4), seed=1))
    assert not torch.equal(a, init_tensor("talker.model.codec_embedding.weight", (8, 4), seed=0))
    with pytest.raises(ValueError, match="seed"):
        init_tensor("x.weight", (2, 2), seed=-1)


@pytest.mark.oracle
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_official_classes_load_strictly_and_run(tiny_dirs, model_type):
    import_oracle()
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration

    root = tiny_dirs[model_type]
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**model_config(model_type, "tiny")))
    model.load_state_dict(load_file(str(root / "model.safetensors")), strict=True)  # no missing/unexpected

    # the official from_pretrained path: main weights, speech_tokenizer/ subfolder, generation config
    model = Qwen3TTSForConditionalGeneration.from_pretrained(str(root), dtype=torch.float32).eval()
    codec = model.speech_tokenizer.model
    codes = torch.randint(0, 2048, (1, 16, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        wav = codec.decoder(codes)  # [1, 1, 12 * 1920]
        hidden = model.talker.model(inputs_embeds=torch.randn(1, 5, 48)).last_hidden_state
    assert wav.shape == (1, 1, 12 * 1920) and torch.isfinite(wav).all()
    # the init keeps audio inside the [-1, 1] clamp, so decoder errors stay visible
    assert 0.05 < wav.std().item() < 0.7 and (wav.abs() >= 1).float().mean().item() < 0.05
    assert torch.isfinite(hidden).all()
    if model_type == "base":  # the encoder half and codebooks must produce codes too
        with torch.no_grad():
            encoded = codec.encode(torch.randn(1, 24000) * 0.1, padding_mask=torch.ones(1, 24000, dtype=torch.long))
        assert encoded.audio_codes[0].shape == (13, 16)


@pytest.mark.oracle
@pytest.mark.filterwarnings("ignore:Passing `repetition_penalty`")
def test_official_wrapper_generates_from_tiny_custom_voice(tiny_dirs):
    import_oracle()
    from qwen_tts import Qwen3TTSModel

    tts = Qwen3TTSModel.from_pretrained(str(tiny_dirs["custom_voice"]), dtype=torch.float32)
    torch.manual_seed(0)
    wavs, sample_rate_hz = tts.generate_custom_voice(
        text="Hello world", speaker="Vivian", language="English", max_new_tokens=3
    )
    assert sample_rate_hz == 24000 and wavs[0].shape == (2 * 1920,)


def test_full_size_plan_without_writing(tmp_path, monkeypatch):
    planned = {}

    def fake_write(path, shapes, dtype, make_tensor):
        planned[path.relative_to(tmp_path).as_posix()] = (shapes, dtype)
        path.write_bytes(b"")

    monkeypatch.setattr("checkpoint.tiny.write_safetensors", fake_write)
    make_tiny_checkpoint(tmp_path, "base", size="1b7")
    shapes, dtype = planned["model.safetensors"]
    assert dtype == torch.bfloat16 and shapes == layout.expected_tensor_shapes(model_config("base", "1b7"))
    assert shapes["talker.model.layers.27.mlp.down_proj.weight"] == (2048, 6144)
    shapes, dtype = planned["speech_tokenizer/model.safetensors"]
    assert dtype == torch.float32 and shapes["decoder.decoder.0.conv.weight"] == (1536, 1024, 7)
    assert json.loads((tmp_path / "config.json").read_text())["tts_model_size"] == "1b7"


def test_cli_and_argument_errors(tmp_path, capsys):
    assert main(["--type", "voice_design", "--out", str(tmp_path / "vd"), "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "vd")
    assert json.loads((tmp_path / "vd/config.json").read_text())["tts_model_type"] == "voice_design"
    with pytest.raises(SystemExit):  # non-empty output directory is refused, nothing overwritten
        main(["--type", "base", "--out", str(tmp_path / "vd")])
    assert "not empty" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown tts_model_type 'custom'"):
        make_tiny_checkpoint(tmp_path / "x", "custom")
    with pytest.raises(ValueError, match="unknown model size"):
        make_tiny_checkpoint(tmp_path / "y", "base", size="7b")
