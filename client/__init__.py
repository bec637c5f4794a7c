"""Async Python client of the tts.v1 gRPC API and the `qwen3-tts-say` command."""
from client.client import TtsClient, make_config

__all__ = ["TtsClient", "make_config"]
