"""The gateway's HTTP face: an OpenAI-compatible speech API, a WebSocket for streamed text, and a page.

It calls the gateway's own TextToSpeech servicer in-process (local_calls.py; no loopback gRPC hop),
so admission, limits, voices, metrics and error statuses are the gRPC ones, mapped to HTTP in one
place (errors.py).
"""
