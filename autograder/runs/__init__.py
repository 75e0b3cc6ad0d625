"""Runs of many submissions: the batch, identical answers, late work, the graded folder, entry points."""
