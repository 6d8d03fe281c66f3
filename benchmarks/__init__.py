"""The measurement tools: benchmarks, load and scale tests, the reuse demo and the analysis runs behind the figures
in docs/. They import nameorigin and are run from a clone (`python -m benchmarks.<tool> --help`); the installed
package holds none of them."""
