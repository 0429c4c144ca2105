"""remedy: detect training pathologies, stop the job, repair it and relaunch."""

__version__ = "0.1.0"
