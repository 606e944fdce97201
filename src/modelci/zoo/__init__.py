"""Built-in suites: `zoo:numpy`, `zoo:torch`, `zoo:paddle`; each subfolder is a suite of workload files."""
