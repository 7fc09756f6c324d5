"""The Gradio web UI. ``app.py`` at the repository root is a thin launcher for :func:`main`."""
