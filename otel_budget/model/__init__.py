"""The user's data: budgets, usage, outcomes, stop reasons, errors, paused runs, a model call."""
