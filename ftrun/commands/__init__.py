"""One module per ``ftrun`` command: each a thin orchestration over the library parts below it."""
