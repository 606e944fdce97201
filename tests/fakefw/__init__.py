"""The fake framework `fakefw` 1.0 and 1.1 and a suite that uses it, for the end-to-end tests."""
