"""The trusted grading path: sandboxes and their proxy, the checks' pytest sessions,
verdicts, batches and the scheduler."""
