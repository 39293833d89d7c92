"""Benchmarks of kiln against its peers (kiln-bench), and the bench models."""
