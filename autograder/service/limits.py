"""The service process's own limits, whatever stands in front of it.

* Descriptors: a systemd unit starts with a soft limit of 1,024 open files; every connection
  holds one, so the soft limit is raised to the hard one (which needs no privilege).
* Concurrency: past `CONCURRENCY` connections or requests at once, uvicorn answers 503 at
  once instead of queueing work it cannot finish.
* Its log: an error repeated in a loop (an `accept()` that fails for want of descriptors was
  written 204,704 times in 80 s) is written a few times a minute and then counted, so a flood
  can fill neither the disk nor the journal.
"""
import logging
import resource
import threading
import time

CONCURRENCY = 500  # connections or requests at once before uvicorn answers 503
KEEP_ALIVE = 5  # seconds an idle kept-alive connection is held (uvicorn's default, said here)
REPEATS_PER_MINUTE = 5  # the same log message, before it is only counted


def raise_descriptor_limit():
    """The soft limit on open files raised to the hard limit; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft, soft
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class RepeatFilter(logging.Filter):
    """Lets the same message (logger, level, text before its arguments) through at most
    `per_minute` times a minute; then writes once how many it held back."""

    def __init__(self, per_minute=REPEATS_PER_MINUTE, clock=time.monotonic):
        super().__init__()
        self.per_minute, self.clock = per_minute, clock
        self.seen = {}  # key -> [minute started, written this minute, held back]
        self.lock = threading.Lock()

    def filter(self, record):
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = self.clock()
        with self.lock:
            if len(self.seen) > 1000:  # bounded: forget the oldest minutes
                self.seen = {k: v for k, v in self.seen.items() if now - v[0] < 60}
            entry = self.seen.setdefault(key, [now, 0, 0])
            if now - entry[0] >= 60:
                held, entry[:] = entry[2], [now, 0, 0]
                if held:
                    record.msg = f"{record.msg} [the same message {held} more times in the last minute, not written]"
            if entry[1] >= self.per_minute:
                entry[2] += 1
                return False
            entry[1] += 1
            return True


def log_config():
    """uvicorn's own logging configuration, with every handler behind one RepeatFilter and the
    root logger (asyncio's accept errors, the service's own warnings) on uvicorn's handler."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"repeats": {"()": RepeatFilter}}
    for handler in config["handlers"].values():
        handler["filters"] = ["repeats"]
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
    return config
