"""What grading produces: result files, grades.csv and gradebook, feedback pages,
the class report, Gradescope."""
