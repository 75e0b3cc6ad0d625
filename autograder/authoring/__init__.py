"""For instructors: build notebooks, release them, examples, the corpus, validate."""
