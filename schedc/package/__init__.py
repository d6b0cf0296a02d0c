"""Packages: compile, write HAT packages, load them and launch their functions."""
