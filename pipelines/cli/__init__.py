"""The `windjoin` command line: `main` is the command group, one module per command, `options` the shared pieces."""
