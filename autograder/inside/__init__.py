"""Code that runs next to student code, inside the sandbox. It imports nothing trusted
(import-linter checks it): only `autograder.wire` and itself."""
