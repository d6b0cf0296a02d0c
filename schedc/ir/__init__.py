"""Front-end objects (Array, Nest, Schedule, Plan), the frozen Model and the kernel IR."""
