"""The vyre dialect (installed as vyre_xdsl.dialects)."""
