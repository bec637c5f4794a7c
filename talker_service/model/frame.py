"""One generated frame for a batch of slots: talker step -> codebook-0 sampling -> code predictor.

`FrameDecoder.decode` is the body the service captures as one CUDA graph per batch-size bucket
(static input tensors, device-side indices, no host syncs). `finish` is the same tail for the
first frame, whose logits come from the prefill.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.noise_keys import noise_keys
from talker_service.model.sampling import choose_tokens_keyed, penalize_and_mask, suppressed_with_eos
from talker_service.model.slot_sampling import SlotSamplingTable
from talker_service.model.talker import TalkerModel


@dataclass
class FrameOutput:
    codes: torch.Tensor  # int64 [bs, 16]; codes[:, 0] == EOS means the request ended (no frame)
    hidden: torch.Tensor  # [bs, H] post-norm talker hidden that produced codes[:, 0]
    codec_embeds: torch.Tensor  # [bs, H] embed_frame(codes): next talker input minus its text track


class FrameDecoder:
    def __init__(self, model: TalkerModel, table: SlotSamplingTable, codec_eos_id: int,
                 candidate_k: int | None = None):
        vocab = model.config.vocab_size
        if not vocab - 1024 <= codec_eos_id < vocab:
            raise ValueError(f"codec EOS id {codec_eos_id} is outside the special range [{vocab - 1024}, {vocab})")
        self.model = model
        self.table = table
        self.codec_eos_id = codec_eos_id
        self.candidate_k = candidate_k
        # every special codec id (control, language, speaker) is never sampled, except EOS
        suppressed = torch.zeros(vocab, dtype=torch.bool, device=model.device)
        suppressed[vocab - 1024:] = True
        suppressed[codec_eos_id] = False
        self.suppressed = suppressed
        self.suppressed_eos = suppressed_with_eos(suppressed, codec_eos_id)  # rows before min_new_tokens

    def finish(self, hidden: torch.Tensor, logits: torch.Tensor, slots: torch.Tensor, steps: torch.Tensor) -> FrameOutput:
        """hidden [bs, H], logits [bs, vocab] of the position that predicts frame `steps` [bs] of each slot."""
        rows = self.table.gather(slots)
        processed = penalize_and_mask(logits.float(), rows.history, rows.repetition_penalty, steps,
                                      rows.min_new_tokens, self.codec_eos_id, self.suppressed, self.suppressed_eos)
        # [bs, 16]: the noise keys of the frame's 16 samplings, hash_noise.group_keys in one launch
        keys = noise_keys(rows.seeds, steps, 0, 16)
        c0 = choose_tokens_keyed(processed, rows.talker, keys[:, 0], self.candidate_k)
        self.table.record(slots, c0)
        residual = self.model.predict_residuals(hidden, c0, rows.subtalker, keys[:, 1:], self.candidate_k)
        codes = torch.cat((c0[:, None], residual), dim=1)
        return FrameOutput(codes=codes, hidden=hidden, codec_embeds=self.model.embed_frame(codes))

    def decode(self, input_embeds: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
               steps: torch.Tensor) -> FrameOutput:
        """input_embeds [bs, H] (previous frame's codec_embeds + text track) at positions [bs] -> next frame."""
        hidden, logits = self.model.decode_step(input_embeds, slots, positions)
        return self.finish(hidden, logits, slots, steps)
