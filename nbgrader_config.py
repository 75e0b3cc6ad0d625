"""This folder is an nbgrader course directory: source/, release/, submitted/ ..."""
c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.course_id = "attention"

# A stub that tells students what to do, kept in their notebook.
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("Not answered yet: replace this line with your code.")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# The hidden checks import the `autograder` package, installed next to nbgrader.
c.Execute.timeout = 120

# Feedback shows students their results, never the hidden test cells' code:
# nbgrader's own feedback keeps hidden tests unless told otherwise (issues #917, #1363).
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, ClearMarkScheme, GetGrades  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, ClearMarkScheme, CSSHTMLHeaderPreprocessor]

# The concept questions' rubric for TAs sits in a read-only cell, between ### BEGIN MARK SCHEME
# and ### END MARK SCHEME: generate_assignment leaves it out of the release, grading restores the
# read-only cell from source/, so formgrader shows it, and feedback (above) drops it again.
# nbgrader expects mark schemes only in "manually graded task" cells, which carry points of
# their own; ours carries none, so the check that the cell is a task is off.
c.ClearMarkScheme.enforce_metadata = False
