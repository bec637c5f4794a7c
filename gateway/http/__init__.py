"""The gateway's HTTP face: an OpenAI-compatible speech API, a WebSocket for streamed text, and a page.

It is a client of the gateway's own gRPC TextToSpeech on loopback, so admission, limits, voices,
metrics and error statuses are the gRPC ones, mapped to HTTP in one place (errors.py).
"""
