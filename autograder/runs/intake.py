"""Which files are whose: submissions found in files, LMS-style folders and nbgrader's submitted/ tree."""
from pathlib import Path

from autograder.grading.notebook import Submission
from autograder.untrusted import student_id as safe_student_id


def discover(paths, assignment):
    """[Submission] from files, LMS-style folders of notebooks and nbgrader submitted/ trees."""
    found = []
    for raw in paths:
        path = Path(raw).absolute()  # results name their file: later commands may run from elsewhere
        if path.is_file():
            found.append(_submission(_student_id(path, assignment), path))
        elif path.is_dir() and (path / assignment).is_dir():  # one student's folder in submitted/
            found += [_submission(path.name, p) for p in sorted((path / assignment).glob("*.ipynb"))]
        elif path.is_dir():
            tree = sorted(path.glob(f"*/{assignment}/*.ipynb"))
            files = tree or sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            found += [_submission(_student_id(p, assignment), p) for p in files]
        else:
            raise FileNotFoundError(f"{path} does not exist")
    chosen = {}
    for submission in found:
        best = chosen.get(submission.student_id)
        if best is None or _preference(submission, assignment) < _preference(best, assignment):
            chosen[submission.student_id] = submission
    for submission in found:
        best = chosen[submission.student_id]
        if submission is not best:
            best.ignored.append(str(submission.path))
    return sorted(chosen.values(), key=lambda s: s.student_id)


def _preference(submission, assignment):
    """One notebook per student: the one named after the assignment, else the shortest name."""
    return (submission.path.stem != assignment, len(submission.path.name), str(submission.path))


def _submission(name, path):
    """A Submission whose id is safe as a file name, in a terminal and in the gradebook: a
    name that starts with a dot (`.batch` would be written over the batch's own .batch.json),
    holds control characters or is too long is graded under a safe id, and says why."""
    student, renamed = safe_student_id(name)
    return Submission(student, path, renamed=renamed)


def _student_id(path, assignment):
    # nbgrader layout: submitted/<student>/<assignment>/<notebook>.ipynb
    if path.parent.name == assignment and path.parent.parent.name:
        return path.parent.parent.name
    return path.stem
