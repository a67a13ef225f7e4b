"""`otel-budget demo`: the invoice agent run healthy and stuck against the scripted server."""
