"""The 12 Hz speech-tokenizer decoder (Code2Wav): offline decode and exact stateful streaming."""
from vocoder_service.codec.config import DecoderConfig
from vocoder_service.codec.model import Code2Wav
from vocoder_service.codec.streaming import StreamingDecoder

__all__ = ["Code2Wav", "DecoderConfig", "StreamingDecoder"]
