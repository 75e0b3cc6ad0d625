"""What the client and its Dask workers agree on: the names of plugins and attempt logs, how often a
submission may kill a worker, and what names a batch."""
import hashlib
import json


MAX_ATTEMPTS = 2  # a submission whose grading kills a worker is tried once more, then recorded
ATTEMPTS_TOPIC = "autograder-attempt-"
PLUGIN_PREFIX = "autograder-"
KILLED_TWICE = "killed-twice"


class ClusterError(RuntimeError):
    """The cluster cannot be used (unreachable, refused, no workers, lost); the message says why."""


def batch_key(bundle_hash, spec):
    """What names this batch on the cluster: the course bundle and every setting that changes a grade."""
    settings = json.dumps({"seed": spec.seed, "limits": spec.limits, "isolation": spec.isolation,
                           "assignment": spec.assignment}, sort_keys=True)
    return hashlib.sha256(f"{bundle_hash}\0{settings}".encode()).hexdigest()[:20]
