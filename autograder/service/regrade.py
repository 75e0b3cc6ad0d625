"""A TA's regrade of everyone, after a check, a weight or a solution changed: through the batch.

What counts is in service/counted/<assignment>/ in nbgrader's submitted/ layout, so the
regrade is `autograder grade` itself (runs/batch.py) over that folder: it regrades the results
made with other checks, keeps the previous ones in history/ and lists moved scores in
changes.csv. The regrade records through the service's own recorder (runs/recording.py), so there is one
writer of each output, the gradebook included. The lane's workers are paused meanwhile and
started again afterwards, so later submissions are graded with the checks as they are now.
"""
from datetime import datetime, timezone

from autograder.runs.batch import grade_batch
from autograder.service.submit import when


def regrade(service, assignment):
    """Regrade what counts of `assignment`; returns one line for the TA's page."""
    lane = service.lanes[assignment.name]
    record = service.counting.records[assignment.name]
    counted = service.root / "counted" / assignment.name
    lane.pause()
    try:
        if not counted.is_dir():
            return f"nothing to regrade yet ({when(datetime.now(timezone.utc))})"
        folder = record.folder
        report = grade_batch(assignment, [counted], record.recorder, out_dir=folder, jobs=lane.pool.jobs,
                             roster=service.roster)
    finally:
        lane.resume()
    return (f"done at {when(datetime.now(timezone.utc))}: {len(report.graded)} regraded, {report.skipped} unchanged,"
            f" {len(report.changes)} scores moved (changes.csv in {folder.root})"
            + (f"; {len(report.problems)} problems (see the class report)" if report.problems else ""))
