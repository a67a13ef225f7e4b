"""Provider SDK adapters: openai, anthropic, google-genai, litellm."""
