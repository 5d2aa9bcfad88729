"""The one error type users see: the CLI prints its message on one line and exits 2."""


class FdprofError(Exception):
    """Bad input or configuration, said in one line a user can act on."""
