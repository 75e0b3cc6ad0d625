"""What a result becomes: each output is one class behind `base.Output` (add(result),
finish(results)); `folder.GradedFolder` names every file in graded/<assignment>/."""
