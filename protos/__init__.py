"""Every wire contract of the service: the public `tts.v1` gRPC API, the internal admin gRPC
services and the ZeroMQ messages (`tts.internal.v1`), and the multipart codec (`protos.wire`).
Generated modules are committed; regenerate with `python -m protos.generate`."""
