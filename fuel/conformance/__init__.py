"""Conformance harnesses: fuel measured against external test suites (``.onnx``)."""
