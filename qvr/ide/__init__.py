"""Editor features as plain Python data in document offsets (hover, goto, rename, symbols,
completion, signature help, inlay hints, semantic tokens, folding, selection, quick fixes).

One module per feature, each a function of a `qvr.analysis.Document`.  No LSP types and no
LSP libraries here: `qvr_lsp` adapts these records to the protocol.
"""
