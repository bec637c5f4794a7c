"""Model-type rules and id lookups for prompt building, on top of the checkpoint's special ids.

Ids come from `config.json` via ModelSpecialIds (never from class defaults: the official config
classes ship wrong ones such as codec EOS 4198). Validation errors list the valid choices so a
caller can fix the request without reading the model card.
"""
from __future__ import annotations

from dataclasses import dataclass

from talker_service.model.config import ModelSpecialIds

# The Qwen2 BPE id of "\n": the third role token of "<|im_start|>assistant\n".
NEWLINE_ID = 198


@dataclass(frozen=True)
class PromptVocab:
    ids: ModelSpecialIds
    model_type: str     # "base" | "custom_voice" | "voice_design"
    model_size: str     # "1b7" | "0b6"

    @classmethod
    def from_config(cls, config: dict) -> "PromptVocab":
        model_type = config.get("tts_model_type")
        if model_type not in ("base", "custom_voice", "voice_design"):
            raise ValueError(f"config.json: tts_model_type={model_type!r}; expected base, custom_voice or voice_design")
        return cls(ModelSpecialIds.from_config(config), model_type, str(config.get("tts_model_size", "1b7")))

    @property
    def tts_pad_id(self) -> int:
        return self.ids.tts_pad

    @property
    def tts_bos_id(self) -> int:
        return self.ids.tts_bos

    @property
    def tts_eos_id(self) -> int:
        return self.ids.tts_eos

    @property
    def role_ids(self) -> list[int]:
        return [self.ids.im_start, self.ids.assistant, NEWLINE_ID]

    @property
    def supported_languages(self) -> list[str]:
        """"auto" plus the real languages; dialects are reached only through their speakers."""
        return ["auto"] + sorted(k for k in self.ids.language_ids if "dialect" not in k)

    @property
    def supported_speakers(self) -> list[str]:
        return sorted(self.ids.speaker_ids)

    @property
    def has_instruct(self) -> bool:
        """VoiceDesign always reads an instruction; CustomVoice only at 1.7B (the official 0.6B
        CustomVoice wrapper drops it); Base has no instruction input."""
        if self.model_type == "voice_design":
            return True
        return self.model_type == "custom_voice" and self.model_size != "0b6"

    def check_language(self, language: str | None) -> str:
        name = (language or "").lower()
        if name not in self.supported_languages:
            raise ValueError(f"unknown language {language!r} for this {self.model_type} model; "
                             f"valid: {', '.join(self.supported_languages)}")
        return name

    def speaker_id(self, speaker: str) -> int:
        name = speaker.lower()
        if not self.ids.speaker_ids:
            raise ValueError(f"a {self.model_type} model has no named speakers (got speaker {speaker!r})")
        if name not in self.ids.speaker_ids:
            raise ValueError(f"unknown speaker {speaker!r}; valid: {', '.join(self.supported_speakers)}")
        return self.ids.speaker_ids[name]

    def control_ids(self, language: str, speaker: str | None = None) -> list[int]:
        """Codec control prefix before the speaker slot: the nothink form for "auto", the think
        form with a language id otherwise; a dialect speaker turns chinese/auto into its dialect."""
        name = self.check_language(language)
        language_id = None if name == "auto" else self.ids.language_ids[name]
        if speaker and name in ("chinese", "auto"):
            dialect = self.ids.speaker_dialects.get(speaker.lower(), False)
            if dialect:
                language_id = self.ids.language_ids[dialect]
        if language_id is None:
            return [self.ids.codec_nothink, self.ids.codec_think_bos, self.ids.codec_think_eos]
        return [self.ids.codec_think, self.ids.codec_think_bos, language_id, self.ids.codec_think_eos]
