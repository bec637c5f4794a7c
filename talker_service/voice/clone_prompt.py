"""A cloned voice, computed once from reference audio and reused by every request that names it.

Stored as one safetensors file: the tensors plus a JSON description in the header metadata
(`__metadata__["voice_prompt"]`). No pickle anywhere, so a prompt file from an untrusted client
cannot run code; the header is read first, so a wrong-size prompt is refused before its tensors
are touched.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

logger = logging.getLogger(__name__)

FORMAT_NAME = "qwen3-tts-voice-clone-prompt"
FORMAT_VERSION = 1
NUM_CODE_GROUPS = 16
CODEBOOK_SIZE = 2048
_METADATA_KEY = "voice_prompt"


@dataclass
class VoiceClonePrompt:
    x_vector: torch.Tensor            # [H] float32 speaker embedding
    ref_codes: torch.Tensor | None    # [K, 16] int64 reference codes (ICL mode only)
    ref_text_ids: list[int] | None    # reference text token ids, bare (ICL mode only)
    # What the prompt was made for; the talker refuses a prompt of another hidden size.
    tts_model_type: str = "base"
    tts_model_size: str | None = None
    ref_text: str | None = None       # kept for humans (listing a registry), never fed to the model

    def __post_init__(self) -> None:
        if not isinstance(self.x_vector, torch.Tensor) or self.x_vector.dim() != 1 or self.x_vector.numel() == 0:
            raise ValueError(f"x_vector must be a non-empty 1-D tensor [H], got {_describe(self.x_vector)}")
        self.x_vector = self.x_vector.detach().to(device="cpu", dtype=torch.float32).contiguous()
        if not torch.isfinite(self.x_vector).all():
            raise ValueError("x_vector contains NaN or Inf")
        if (self.ref_codes is None) != (self.ref_text_ids is None):
            raise ValueError(
                "ref_codes and ref_text_ids go together: both set (in-context mode) or both None "
                f"(x-vector-only mode); got ref_codes={_describe(self.ref_codes)}, "
                f"ref_text_ids={'None' if self.ref_text_ids is None else f'{len(self.ref_text_ids)} ids'}"
            )
        if self.ref_codes is not None:
            codes = self.ref_codes
            if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.shape[1] != NUM_CODE_GROUPS:
                raise ValueError(f"ref_codes must be [K, {NUM_CODE_GROUPS}], got {_describe(codes)}")
            if codes.shape[0] == 0:
                raise ValueError("ref_codes has no frames")
            if codes.dtype.is_floating_point or codes.dtype == torch.bool:
                raise ValueError(f"ref_codes must be integer codes, got dtype {codes.dtype}")
            if int(codes.min()) < 0 or int(codes.max()) >= CODEBOOK_SIZE:
                raise ValueError(
                    f"ref_codes out of range [0, {CODEBOOK_SIZE}): min {int(codes.min())}, max {int(codes.max())}"
                )
            self.ref_codes = codes.detach().to(device="cpu", dtype=torch.int64).contiguous()
            self.ref_text_ids = [int(i) for i in self.ref_text_ids]
            if not self.ref_text_ids:
                raise ValueError("ref_text_ids is empty; in-context mode needs the reference transcript")

    @property
    def icl_mode(self) -> bool:
        """In-context mode: reference codes + text prime the talker (and the decoder)."""
        return self.ref_codes is not None

    @property
    def hidden_size(self) -> int:
        return int(self.x_vector.shape[0])

    @property
    def num_ref_frames(self) -> int:
        return 0 if self.ref_codes is None else int(self.ref_codes.shape[0])

    def check_hidden_size(self, hidden_size: int, where: str = "this model") -> None:
        if self.hidden_size != hidden_size:
            raise ValueError(
                f"voice prompt was made for a model of hidden size {self.hidden_size} "
                f"(tts_model_size={self.tts_model_size!r}) but {where} has hidden size {hidden_size}; "
                "re-create the voice from its reference audio with this model"
            )

    # ---- serialisation -------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        tensors = {"x_vector": self.x_vector}
        if self.icl_mode:
            tensors["ref_codes"] = self.ref_codes
            tensors["ref_text_ids"] = torch.tensor(self.ref_text_ids, dtype=torch.int64)
        info = {
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "tts_model_type": self.tts_model_type, "tts_model_size": self.tts_model_size,
            "hidden_size": self.hidden_size, "icl_mode": self.icl_mode,
            "num_ref_frames": self.num_ref_frames, "ref_text": self.ref_text,
        }
        return save_safetensors_bytes(tensors, metadata={_METADATA_KEY: json.dumps(info)})

    @classmethod
    def from_bytes(cls, data: bytes, hidden_size: int | None = None, source: str = "voice prompt") -> "VoiceClonePrompt":
        info = _read_info(data, source)
        if hidden_size is not None and info["hidden_size"] != hidden_size:
            raise ValueError(
                f"{source} was made for a model of hidden size {info['hidden_size']} "
                f"(tts_model_size={info.get('tts_model_size')!r}) but this model has hidden size "
                f"{hidden_size}; re-create the voice from its reference audio with this model"
            )
        tensors = load_safetensors_bytes(data)
        if "x_vector" not in tensors:
            raise ValueError(f"{source} has no 'x_vector' tensor")
        is_icl = bool(info.get("icl_mode"))
        if is_icl and not {"ref_codes", "ref_text_ids"} <= tensors.keys():
            raise ValueError(f"{source} says icl_mode but lacks 'ref_codes' or 'ref_text_ids'")
        prompt = cls(
            x_vector=tensors["x_vector"],
            ref_codes=tensors["ref_codes"] if is_icl else None,
            ref_text_ids=tensors["ref_text_ids"].tolist() if is_icl else None,
            tts_model_type=info.get("tts_model_type", "base"),
            tts_model_size=info.get("tts_model_size"),
            ref_text=info.get("ref_text"),
        )
        if prompt.hidden_size != info["hidden_size"]:
            raise ValueError(f"{source}: header says hidden size {info['hidden_size']}, x_vector has {prompt.hidden_size}")
        return prompt

    def save(self, path: str | Path) -> None:
        """Write atomically (temp file + rename), so a reader never sees half a prompt."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.to_bytes())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        logger.info("saved voice prompt %s (hidden %d, %d reference frames)", path, self.hidden_size, self.num_ref_frames)

    @classmethod
    def load(cls, path: str | Path, hidden_size: int | None = None) -> "VoiceClonePrompt":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"voice prompt file not found: {path}")
        return cls.from_bytes(path.read_bytes(), hidden_size=hidden_size, source=f"voice prompt {path}")


def _read_info(data: bytes, source: str) -> dict:
    """The JSON description from the safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise ValueError(f"{source} is not a safetensors file (only {len(data)} bytes)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        raise ValueError(f"{source} is not a safetensors file (header length {header_len} exceeds file)")
    try:
        header = json.loads(data[8:8 + header_len])
        info = json.loads(header["__metadata__"][_METADATA_KEY])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{source} is not a voice prompt file (no {_METADATA_KEY!r} metadata: {exc})") from None
    if info.get("format") != FORMAT_NAME:
        raise ValueError(f"{source} has format {info.get('format')!r}, expected {FORMAT_NAME!r}")
    version = info.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{source} has format_version {version!r}; this build reads version {FORMAT_VERSION}")
    if not isinstance(info.get("hidden_size"), int):
        raise ValueError(f"{source} header lacks an integer hidden_size")
    return info


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} dtype {value.dtype}"
    return type(value).__name__

