"""What is reported: every name, spans and metrics, exporters, setup from the environment."""
