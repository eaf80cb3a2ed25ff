"""The ``pwevent`` command line: :mod:`streams.cli.main` builds the parser and runs a command;
one module per command beside it."""
