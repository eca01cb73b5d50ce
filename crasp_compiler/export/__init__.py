"""Exports of compiled models to torch, safetensors and TransformerLens-style files."""
