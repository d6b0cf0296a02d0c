"""The frozen Model and the kernel IR: its nodes and kinds, its traversal, its handler registries,
and the layouts and numbers both use."""
