"""nbgrader's gradebook as nbgrader's own tools share it: where the course keeps it, the points a
TA entered in formgrader (read for the final grade), and taking a submission out of it. Writing
results into it is gradebook.py's."""
import contextlib
import warnings
from pathlib import Path


def gradebook_url(course):
    """The course's database URL from nbgrader's own config (sqlite gradebook.db by default)."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config_file = Path(course) / "nbgrader_config.py"
    from traitlets.config import Config

    config = PyFileConfigLoader(config_file.name, path=str(course)).load_config() if config_file.exists() else Config()
    config.CourseDirectory.root = str(Path(course).resolve())  # the config's "." means the course, not our cwd
    return CourseDirectory(config=config).db_url


@contextlib.contextmanager
def quiet():
    """Silence the SQLAlchemy chatter from inside nbgrader."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def read_manual_scores(course, assignment, db_url=None):
    """{student: {cell: (manual score or None, extra credit or None)}} of `assignment`'s notebook
    in nbgrader's gradebook, as formgrader left them: the points a TA gave written answers, and
    any autograded cell a TA overrode. Read only; {} when the course has no gradebook yet."""
    from nbgrader.api import Gradebook, MissingEntry

    db_url = db_url or gradebook_url(course)
    if db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists():
        return {}
    found = {}
    with quiet(), Gradebook(db_url) as gradebook:
        try:
            submissions = gradebook.assignment_submissions(assignment)
        except MissingEntry:
            return {}
        for submission in submissions:
            notebook = next((n for n in submission.notebooks if n.name == assignment), None)
            if notebook is not None:
                found[submission.student.id] = {grade.name: (grade.manual_score, grade.extra_credit)
                                                for grade in notebook.grades}
    return found


def remove_submission(course, assignment, student, db_url=None, force=False):
    """Take one student's submission of `assignment` out of nbgrader's gradebook (formgrader,
    `nbgrader export`), and the student too when nothing else of theirs is left (a test folder,
    a stray file). Returns what was done, in words. Points a TA entered by hand are lost with
    it, so a submission that has any is removed only with `force` (else ValueError says so)."""
    from nbgrader.api import Gradebook, MissingEntry

    db_url = db_url or gradebook_url(course)
    if db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists():
        return "not in nbgrader's gradebook (there is none)"
    with quiet(), Gradebook(db_url) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return "not in nbgrader's gradebook"
        entered = sorted(grade.name for notebook in submission.notebooks for grade in notebook.grades
                         if grade.manual_score is not None or grade.extra_credit)
        if entered and not force:
            raise ValueError(f"{student} has points a TA entered in formgrader ({', '.join(entered)}), which would be"
                             " lost: add --force to remove them too")
        gradebook.remove_submission(assignment, student)
        left = gradebook.find_student(student).submissions
        if not left:
            gradebook.remove_student(student)
            return "removed from nbgrader's gradebook, with the student (nothing else of theirs was there)"
        return "its submission removed from nbgrader's gradebook"
