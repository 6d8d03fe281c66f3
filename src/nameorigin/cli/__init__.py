"""The console commands; scripts/*.py run the same mains."""
