"""Evaluators: score candidate architectures (warm-up-KD supernet inheritance, penalties)."""
