"""Talker LM + code predictor over a static per-slot KV cache, and per-request sampling."""
from talker_service.model.config import CodePredictorConfig, ModelSpecialIds, TalkerConfig
from talker_service.model.frame import FrameDecoder, FrameOutput
from talker_service.model.sampling import RowSampling, SamplingParams, choose_tokens, penalize_and_mask, warp_logits
from talker_service.model.slot_sampling import SlotRows, SlotSamplingTable
from talker_service.model.talker import TalkerModel

__all__ = [
    "CodePredictorConfig", "FrameDecoder", "FrameOutput", "ModelSpecialIds", "RowSampling", "SamplingParams",
    "SlotRows", "SlotSamplingTable", "TalkerConfig", "TalkerModel", "choose_tokens", "penalize_and_mask",
    "warp_logits",
]
