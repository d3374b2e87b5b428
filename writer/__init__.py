"""The writer: the Litestar API, the ``memarc`` command line and the process runner."""
