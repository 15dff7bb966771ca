"""Developer tools of k3diff (throughput benchmark)."""
