"""The `yunque` command: one module per subcommand group; `main` builds the parser."""
