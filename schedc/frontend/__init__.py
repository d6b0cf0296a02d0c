"""Accera's front-end objects: Array, Nest, Schedule, Plan, parameters and the script's names;
``freeze`` reads them into the frozen Model (``schedc.ir``)."""
