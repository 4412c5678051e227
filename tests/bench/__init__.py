"""Tests of the benchmark harness (bench/)."""
