"""One-command local stack: vocoder + talker + gateway on one machine (`python -m launcher`)."""
