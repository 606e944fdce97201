"""modelci: model-level CI for machine-learning frameworks.

This top-level package is the suite author's API only. It runs inside the environment under test,
so importing it pulls in nothing but the standard library.
"""

from modelci.workload.api import Context, Format, SkipWorkload, Workload

__all__ = ["Context", "Format", "SkipWorkload", "Workload", "__version__"]
__version__ = "0.1.0"
