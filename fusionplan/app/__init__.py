"""Entry points: the Python API, the CLI, benchmarks and reports. Nothing imports this layer
(the ``fusionplan`` package facade reaches the API lazily, by name)."""
