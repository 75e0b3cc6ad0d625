"""The grader's side of a sandbox, one module per facility (as nsjail keeps one per kernel facility).

- `isolation`: how much isolation this machine allows (bubblewrap, else `NoSandbox` unless the TA
  opts out), who student code runs as, what a stranger's uid can reach;
- `agent_files`: the sandbox's own code, a folder of `wire.py` and `inside/`, shared and swept;
- `commands`: the command that starts the warm interpreter, with bubblewrap or without;
- `limits`: what one submission may use (`Limits`: seconds, bytes);
- `process`: one `Sandbox`'s life, from launch to a child per submission to its end;
- `handover`: a sandbox one process launches and another adopts;
- `proxy`: `SandboxStudent`, the probe API answered by the submission in its sandbox.

Import from the module that holds a name: this file imports none of them, so asking whether a
sandbox works (`isolation`) loads nothing else.
"""
