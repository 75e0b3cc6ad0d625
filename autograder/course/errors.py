"""The one error of the course wing, in a module of its own so that the course's modules
(settings, regions) and the package that uses them import it without a circle."""


class CourseError(ValueError):
    """A course or assignment that is not there or not well formed; the message says which."""
