"""Subcommands of the `qvr` command line, one module each.

Each module defines `register(subparsers)`, which adds its parser and sets `func`.  Keep
imports of heavy libraries inside the command functions.
"""
