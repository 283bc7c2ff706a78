"""Executors that run graph nodes elsewhere than this process: a Slurm cluster (docs/cluster.md).

:mod:`~rocmforge.executor.slurm` is the Slurm client (plain ``sbatch``/``squeue``/``scontrol``/
``scancel`` calls) and what a job's end state means; :mod:`~rocmforge.executor.submit` turns a
derivation graph into jobs, watches them and hands back what the cache now holds;
:mod:`~rocmforge.executor.matrix` expands ``--matrix KEY=v1,v2`` into one recipe per cell.
"""
