"""Side-by-side measurements; run each as `python -m benchmarks.<name>` from the repository root."""
