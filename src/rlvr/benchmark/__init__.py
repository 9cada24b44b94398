"""Benchmark: N models x M tasks, one resumable result cell each, reported as JSON files and charts."""
