"""Built-in suites: `zoo:numpy`, `zoo:torch`, `zoo:paddle`, `zoo:jax`; each subfolder is a suite of workload files."""
