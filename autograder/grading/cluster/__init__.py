"""Grade on a Dask cluster: `autograder grade ... --cluster tcp://host:8786` (or `local:N`).

The same scheduler interface as the local pool (see scheduler.py), on Dask
distributed, which brings the scheduler, the workers, the retries, the dashboard
and the deployments (dask-jobqueue on Slurm, dask-kubernetes, the Helm chart).

* The course travels with the batch. A `GradingPlugin` carries the course bundle
  (bundle.py) and the batch's settings to every worker, joining ones included; the
  worker unpacks it into a private folder named by its hash, checks that it may run
  student code (the same refusal as locally, naming the worker) and starts one warm
  sandbox in a grading thread of its own. Each task forks a fresh child there, as
  locally.
* A task is keyed by the batch (bundle hash, seed, limits) and the submission (student,
  notebook hash): Dask's retry of a lost worker's task is the same task, so nothing is
  graded twice, and a resubmitted batch joins tasks that are still running.
* A submission that kills its worker is tried at most twice. Each attempt logs an
  event on the scheduler under the task's key; a third attempt does not run the
  student's code and the client records that student's error instead (so does
  Dask's own KilledWorker, if the scheduler gives up first).
* The client writes each result as it arrives (batch.py), so after a kill -9 of the
  client, a worker or the scheduler, running the same command again grades only
  what is missing.

Modules: `client` (`DaskScheduler` for a batch, `DaskPool` for the service), `workers` (what runs
on each Dask worker), `protocol` (what the two agree on).
"""
