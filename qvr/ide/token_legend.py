"""The semantic-token legend (standard LSP token type and modifier names).

Kept apart from `semantic_tokens.py` so the language server can announce the legend at
`initialize` without importing the front end.
"""
TOKEN_TYPES = ("namespace", "type", "class", "enumMember", "typeParameter", "parameter", "variable",
               "property", "function", "method", "macro", "keyword", "comment", "string", "number",
               "operator")
TOKEN_MODIFIERS = ("declaration", "readonly", "defaultLibrary", "documentation")
