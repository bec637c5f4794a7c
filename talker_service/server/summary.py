"""GenerationSummary of a finished stream: sent with its last frames to the vocoder, and returned
by admin GenerateCodes."""
from __future__ import annotations

from protos.tts.internal.v1 import vocoder_pb2
from protos.tts.v1 import tts_pb2
from talker_service.engine import FINISH_BUDGET, FINISH_CONTEXT, FINISH_EOS, FINISH_LENGTH, FramesOut

FINISH_REASONS = {FINISH_EOS: tts_pb2.FINISH_REASON_END_OF_SPEECH, FINISH_LENGTH: tts_pb2.FINISH_REASON_MAX_FRAMES,
                  FINISH_CONTEXT: tts_pb2.FINISH_REASON_MAX_CONTEXT, FINISH_BUDGET: tts_pb2.FINISH_REASON_TEXT_BUDGET}


def summary_of(out: FramesOut) -> vocoder_pb2.GenerationSummary:
    return vocoder_pb2.GenerationSummary(
        finish_reason=FINISH_REASONS.get(out.finish_reason, tts_pb2.FINISH_REASON_MAX_FRAMES),
        num_frames=out.first_frame_index + out.codes.shape[0], num_prompt_tokens=out.num_prompt_tokens,
        num_text_tokens=out.num_text_tokens, queue_ms=out.queue_ms, prefill_ms=out.prefill_ms,
        first_frame_ms=out.first_frame_ms, second_frame_ms=out.second_frame_ms, total_ms=out.total_ms)
