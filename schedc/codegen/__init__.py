"""Backends over the kernel IR: CUDA C++ text (cuda.py) and numpy emulation (emulate.py)."""
