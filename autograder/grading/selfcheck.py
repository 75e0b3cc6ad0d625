"""Is this interpreter fit to judge? Checked once per process, before any comparison is trusted.

Student code that once ran outside a sandbox can leave a `sitecustomize.py` or a
`.pth` file behind, and from then on every Python process on the machine starts
with `torch.equal` and friends patched to say yes. The trusted side therefore
checks two things before it grades:

* startup files: no `sitecustomize`/`usercustomize` anywhere on the path, and
  no `.pth` file that runs code unless a package installed it (it is listed in
  a `*.dist-info/RECORD`) or it is trusted: by path in
  `AUTOGRADER_TRUSTED_STARTUP_FILES` (separated by `:`), or by path and
  content in the file `trusted_list()` names, which `setup.sh` fills (through
  `autograder trust-startup-files`) with the `.pth` files a fresh machine has;
* the comparisons themselves: the functions checks rely on are torch's own
  (builtins, or Python functions from torch's own files), and they still tell
  zeros from ones.

A problem raises `PoisonedInterpreter`, whose message names the file.
"""
import glob
import os
import site
import sys
import types

TRUSTED_ENV = "AUTOGRADER_TRUSTED_STARTUP_FILES"
HOOK_NAMES = ("sitecustomize", "usercustomize")


class PoisonedInterpreter(RuntimeError):
    """Something outside this package can change how comparisons behave here."""


_verified = set()  # which checks passed in this process


def verify(comparisons=True):
    """Raise PoisonedInterpreter if this interpreter cannot be trusted; cached per process.

    `comparisons=False` checks only the startup files (no torch import: the
    command line parent forks its workers before it pays for torch)."""
    wanted = ("files", "comparisons") if comparisons else ("files",)
    for kind in wanted:
        if kind in _verified:
            continue
        problems = startup_file_problems() if kind == "files" else comparison_problems()
        if problems:
            raise PoisonedInterpreter(
                "this Python installation has been tampered with, so its comparisons cannot be trusted:\n  "
                + "\n  ".join(problems)
                + "\nRemove the file(s) named above (student code may have written them while running"
                  " without a sandbox), then grade again. A startup file that your platform put there on"
                  f" purpose can be trusted by listing its path in {TRUSTED_ENV}, or, on a machine no"
                  " student code has run on, with `autograder trust-startup-files`.")
        _verified.add(kind)


# -- startup files --------------------------------------------------------------------
def _site_dirs():
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some embedded interpreters
        pass
    user = site.getusersitepackages() if site.ENABLE_USER_SITE is not False else None
    if user:
        dirs.append(user)
    seen, unique = set(), []
    for folder in dirs:
        real = os.path.realpath(folder)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            unique.append(real)
    return unique


def _trusted():
    trusted = {os.path.realpath(p) for p in os.environ.get(TRUSTED_ENV, "").split(os.pathsep) if p}
    try:
        with open(trusted_list(), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return trusted
    for line in lines:
        digest, _, path = line.partition(" ")
        if path and _digest(path) == digest:  # trusted as it was: a changed file is suspect again
            trusted.add(os.path.realpath(path))
    return trusted


def trusted_list():
    """Where trusted startup files are recorded, with their SHA-256 (the grader's user's config)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "autograder", "trusted-startup-files")


def _digest(path):
    import hashlib

    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def trust_present_pth_files():
    """Record the .pth files that run code and that no package installed, as they are now.

    For a machine that has just been set up (setup.sh), before any student code
    ran: a platform's own start-up hooks (a CA certificate injector, say) are
    then not mistaken for poison. Never records sitecustomize/usercustomize.
    Returns the paths recorded."""
    found = [path for path in suspicious_startup_files(trusted=set()) if path.endswith(".pth")]
    target = trusted_list()
    try:
        with open(target, encoding="utf-8") as handle:
            kept = [line for line in handle.read().splitlines() if line.partition(" ")[2] not in found]
    except OSError:
        kept = []
    lines = kept + [f"{_digest(path)} {path}" for path in found if _digest(path)]
    from autograder.course import write_atomically

    os.makedirs(os.path.dirname(target), exist_ok=True)
    write_atomically(target, "".join(line + "\n" for line in lines))
    return found


def startup_file_problems():
    """Startup hooks and code-running .pth files that nothing installed on purpose, in words."""
    return [f"{path} ({why})" for path, why in suspicious_startup_files().items()]


def suspicious_startup_files(trusted=None):
    """{path: why} for every startup file that runs code and is not trusted."""
    trusted = _trusted() if trusted is None else trusted
    found = {}
    hooks = [getattr(sys.modules.get(name), "__file__", None) for name in HOOK_NAMES]
    for folder in _site_dirs():
        for name in HOOK_NAMES:
            hooks += [os.path.join(folder, f"{name}.py"), os.path.join(folder, name, "__init__.py")]
    for path in hooks:
        if path and os.path.exists(path) and not _from_system_package(path):
            name = os.path.basename(path) if not path.endswith("__init__.py") else os.path.basename(os.path.dirname(path))
            found[os.path.realpath(path)] = f"{name.removesuffix('.py')} runs in every Python process"
    for folder in {os.path.realpath(p) for p in _pth_dirs()}:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))  # site.py reads .x.pth too
        suspects = [p for p in (os.path.join(folder, n) for n in names) if _runs_code(p)]
        recorded = _recorded_by_packages(folder, suspects) if suspects else set()
        for path in suspects:
            if os.path.basename(path) not in recorded:
                found[os.path.realpath(path)] = "a .pth file that runs code at every start, installed by no package"
    return {path: why for path, why in found.items() if path not in trusted}


def _pth_dirs():
    """The folders whose .pth files Python reads at start-up."""
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def _runs_code(path):
    """site.py executes the lines of a .pth file that start with `import`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return any(line.startswith(("import ", "import\t")) for line in handle)
    except OSError:
        return True  # unreadable: we cannot tell, so it is not trusted


def _recorded_by_packages(folder, paths):
    """The names among `paths` that some installed package lists in its RECORD (pip did put them there)."""
    names, found = {os.path.basename(p).encode() for p in paths}, set()
    for record in glob.glob(os.path.join(folder, "*.dist-info", "RECORD")):
        try:
            with open(record, "rb") as handle:
                text = b"\n" + handle.read()
        except OSError:
            continue
        found |= {name for name in names if b"\n" + name + b"," in text}
    return {name.decode() for name in found}


def _from_system_package(path):
    """Debian's own /usr/lib/python3.X/sitecustomize.py (a link into /etc) belongs to a package."""
    real = os.path.realpath(path)
    if not real.startswith(("/etc/python3", "/usr/lib/python3")):
        return False
    for listing in glob.glob("/var/lib/dpkg/info/*python3*.list"):
        try:
            with open(listing, encoding="utf-8", errors="replace") as handle:
                if any(line.rstrip("\n") in (path, real) for line in handle):
                    return True
        except OSError:
            continue
    return False


# -- the comparisons ------------------------------------------------------------------
def comparison_problems():
    import math

    import torch
    import torch.testing

    torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
    problems = []
    named = {
        "torch.equal": torch.equal, "torch.allclose": torch.allclose, "torch.isclose": torch.isclose,
        "torch.isfinite": torch.isfinite, "torch.isnan": torch.isnan,
        "torch.Tensor.equal": torch.Tensor.equal, "torch.Tensor.allclose": torch.Tensor.allclose,
        "torch.Tensor.isclose": torch.Tensor.isclose, "torch.Tensor.__eq__": torch.Tensor.__eq__,
        "torch.Tensor.__sub__": torch.Tensor.__sub__, "torch.Tensor.abs": torch.Tensor.abs,
        "torch.Tensor.max": torch.Tensor.max, "torch.Tensor.any": torch.Tensor.any,
        "torch.Tensor.all": torch.Tensor.all, "torch.Tensor.item": torch.Tensor.item,
        "torch.testing.assert_close": torch.testing.assert_close, "math.isclose": math.isclose,
    }
    for name, function in named.items():
        where = _foreign(function, torch_dir)
        if where:
            problems.append(f"{name} was replaced by code from {where}")
    # Any other function in torch's namespaces that comes from outside torch (a few
    # are decorators' wrappers from the standard library or typing_extensions).
    allowed = (torch_dir, *_library_dirs())
    for namespace, prefix in ((torch, "torch."), (torch.Tensor, "torch.Tensor."),
                              (torch.nn.functional, "torch.nn.functional."), (torch.testing, "torch.testing.")):
        for name, value in list(vars(namespace).items()):
            if isinstance(value, types.FunctionType) and f"{prefix}{name}" not in named:
                filename = os.path.realpath(value.__code__.co_filename)
                if not filename.startswith(allowed):
                    problems.append(f"{prefix}{name} was replaced by code from {_source(value.__code__.co_filename)}")
    import builtins

    for name, value in vars(builtins).items():
        if isinstance(value, types.FunctionType):
            problems.append(f"builtins.{name} was replaced by code from {_source(value.__code__.co_filename)}")
    if not problems:
        problems += _behaviour_problems(torch)
    return problems


def _library_dirs():
    import sysconfig

    dirs = [sysconfig.get_paths()["stdlib"]]
    extensions = sys.modules.get("typing_extensions")
    if extensions is not None and getattr(extensions, "__file__", None):
        dirs.append(extensions.__file__)
    return [os.path.realpath(d) + ("" if d.endswith(".py") else os.sep) for d in dirs]


def _foreign(function, torch_dir):
    """Where `function` comes from if it is not torch's (or Python's) own, else None."""
    if isinstance(function, (types.BuiltinFunctionType, types.WrapperDescriptorType,
                             types.MethodDescriptorType, types.MethodWrapperType)):
        return None
    code = getattr(function, "__code__", None)
    if code is not None:
        filename = os.path.realpath(code.co_filename)
        return None if filename.startswith(torch_dir) else _source(code.co_filename)
    return f"an object of type {type(function).__name__}"


def _source(filename):
    if os.path.exists(filename):
        return os.path.realpath(filename)
    return f"{filename} (no such file: code run at start-up by a .pth file, or by exec)"


def _behaviour_problems(torch):
    """Patched in C or by some path the checks above miss: they must still say no."""
    import math

    zeros, ones = torch.zeros(3), torch.ones(3)
    answers = {
        "torch.equal": (lambda: torch.equal(zeros, ones), lambda: torch.equal(zeros, zeros)),
        "torch.allclose": (lambda: torch.allclose(zeros, ones), lambda: torch.allclose(ones, ones)),
        "torch.Tensor.allclose": (lambda: zeros.allclose(ones), lambda: ones.allclose(ones)),
        "torch.isclose": (lambda: bool(torch.isclose(zeros, ones).any()), lambda: bool(torch.isclose(ones, ones).all())),
        "==": (lambda: bool((zeros == ones).any()), lambda: bool((ones == ones).all())),
        "math.isclose": (lambda: math.isclose(0.0, 1.0), lambda: math.isclose(1.0, 1.0)),
    }
    problems = []
    for name, (different, same) in answers.items():
        try:
            right = different() is False and same() is True  # real booleans, and the right ones
        except Exception:
            right = False
        if not right:
            problems.append(f"{name} does not tell zeros from ones")
    # (assert_close is checked by origin only: its first call imports for 1.5 s)
    return problems
