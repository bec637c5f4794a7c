"""Voice cloning front end: reference audio -> x-vector (+ reference codes and text) -> VoiceClonePrompt.

Modules: clone_prompt (the saved prompt), reference_audio (checks + resampling), mel +
speaker_encoder + xvector (the x-vector), codec_encoder (reference codes), builder
(build_clone_prompt). Kept import-light: import the submodule you need.
"""
