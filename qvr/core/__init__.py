"""Core objects under the module paths of the user's snippets (runtime spec 2.3)."""
