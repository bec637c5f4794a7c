"""The part of the vocoder that owns the GPU: the decode runner (`runner`), the CUDA graphs it replays,
one per (batch, frames) shape (`graphs`), and its counters and latency windows (`stats`).

The engine above hands the runner host arrays and gets host PCM back; nothing here knows about
requests, sockets or the wire. The service and every decoder benchmark go through this package,
so what a benchmark times is what the service runs.
"""
