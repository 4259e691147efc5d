"""Conformance harnesses that measure fuel against external test suites (``fuel.conformance.onnx``)."""
