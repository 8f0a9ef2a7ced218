"""qvr_tui: the QVR dashboard (Textual).  Importing the package loads nothing heavy; the
UI process never imports torch (the fit runs in a worker process)."""
