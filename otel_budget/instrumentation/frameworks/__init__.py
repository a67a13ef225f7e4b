"""Agent framework adapters: OpenAI Agents SDK, LangChain/LangGraph, Claude Agent SDK, pydantic-ai."""
