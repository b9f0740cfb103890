"""The exceptions terra-nb raises. Each names the problem and says what to do."""


class TerraError(Exception):
    """Base class of every error raised by terra-nb."""


class TerraUsageError(TerraError, ValueError):
    """The caller used the API wrongly (bad argument, wrong state); nothing was changed."""


class GraphError(TerraError):
    """A TraceGraph is malformed; the message names the bad node."""
