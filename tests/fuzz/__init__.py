"""schedc's random-schedule differential tester.

A seeded generator (``generate.py``: nests from ``statements.py``/``nest.py``, SIMT schedules
from ``schedules.py``, tensor-core plans from ``tensor.py``) makes *programs*: frozen
descriptions of schedule scripts (``program.py``), typed and value-bounded by schedc's rules
(``values.py``) so that kernel and float64 reference agree unless schedc has a bug. Each
program renders to a standalone Accera-style script (``render.py``); ``run.py`` runs it as
``schedc show`` does, emulates every block against the reference, compiles the CUDA with
NVRTC and classifies the outcome (correct, refused, or a failure: refused_valid, wrong,
internal, hang); ``pool.py`` runs programs in worker processes with a time limit;
``shrink.py`` simplifies a failing program while its failure signature stays;
``campaign.py`` and ``report.py`` tie it together for ``tests/test_fuzz.py`` and
``python -m tests.fuzz``; ``gpu.py`` adds a device comparison for GPU machines.
"""
