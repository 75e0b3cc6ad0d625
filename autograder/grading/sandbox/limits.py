"""What one submission may use (`Limits`), in the sandbox's own terms: seconds and bytes.

Instructors give them in assignment.toml in theirs (seconds, megabytes); `LimitsSettings.sandbox_limits`
in course/settings.py is the one place those become these."""
from dataclasses import dataclass


@dataclass
class Limits:
    timeout: float = 120.0  # wall-clock seconds for one submission, cells and probes together
    # Memory the submission may add to the warm interpreter's: its address space, and (where
    # cgroups can be made, see cgroups.py) everything it holds, shared memory, tmpfs pages
    # and kernel memory included.
    memory_bytes: int = 4 * 2**30
    max_processes: int = 64  # processes and threads at once
    max_file_bytes: int = 16 * 2**20  # any one file, student output included
    scratch_bytes: int = 512 * 2**20  # the whole writable tmpfs
    max_files: int = 20000  # files and folders in it (each costs kernel memory)


def in_words(count):
    """1 GiB, 512 MiB: a memory size in words."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if count >= unit:
            return f"{count / unit:g} {name}"
    return f"{count} bytes"
