"""The dashboard: server-rendered pages of one user's sessions, checkpoints and injections.

``views`` and ``tokens`` answer the requests, ``selectors`` holds their reads (every one
scoped by ``Viewer``), ``diff`` compares consecutive checkpoints and ``charts`` draws the
activity page's SVG.
"""
