"""Code that runs inside the environment under test: standard library only (numpy when present)."""
