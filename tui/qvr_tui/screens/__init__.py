"""The dashboard's screens and panes, one module each (`program.py`: `ProgramPane`)."""
