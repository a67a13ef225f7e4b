"""Small helpers for the core tests."""

from __future__ import annotations

import openai


def ask(client: openai.OpenAI, text: str = "hello", **kwargs):
    """One chat completion with the real SDK."""
    return client.chat.completions.create(model=kwargs.pop("model", "gpt-4o"),
                                          messages=[{"role": "user", "content": text}], **kwargs)
