"""The dashboard's widgets, one module each (source view, outline, diagnostics list, hover
panel, heatmap, ...).  Nothing is imported here, so a screen loads only what it uses."""
