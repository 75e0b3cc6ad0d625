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
