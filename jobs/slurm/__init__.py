from remedy.jobs.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
