"""Integrations with outside frameworks: one module each, patches and adapters only."""
