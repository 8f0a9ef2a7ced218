"""The version of qvr (`qvr.__version__`): apart from the root package so that the modules
below it that record the version (`qvr.runs.writer.versions`) read it without importing
the root package, which is the layer above them all."""
__version__ = "0.1.0"
