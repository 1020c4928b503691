"""Seams for tk_ops' own tests and tools, not part of the API: internal ops that take as an explicit argument what a
user's call decides by itself (a kernel configuration, an algorithm), one module per kernel family. Nothing here
changes how any other call behaves: there is no process-global switch."""
