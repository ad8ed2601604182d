"""ftrun's version, in a leaf module: the manifests, the summaries and ``versions()`` read it from
here, never from ``ftrun/__init__`` (an import up the layers). ``ftrun.__version__`` is this one;
pyproject.toml's ``version`` says the same."""

__version__ = "0.1.0"
