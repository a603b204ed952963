"""Outbound side of the tracing port and the logs: OpenTelemetry spans, Prometheus metrics, log formats."""
